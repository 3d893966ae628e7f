package kafkaarrow

import (
	"time"
	"unsafe"
)

func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

func timeMilli(ms int64) time.Time { return time.UnixMilli(ms) }
