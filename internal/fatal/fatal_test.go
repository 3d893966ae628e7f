package fatal

import (
	"errors"
	"testing"
)

func TestRaiseCallsHandlerOnceWithTheFirstError(t *testing.T) {
	var got []error
	restore := SetHandler(func(err error) { got = append(got, err) })
	defer restore()

	if Raise(nil) != nil || Err() != nil {
		t.Fatal("a nil error must not be recorded")
	}
	first := errors.New("authentication failed")
	ret := Raise(first)
	_ = Raise(errors.New("second"))

	var fe *Error
	if !errors.As(ret, &fe) || !errors.Is(ret, first) {
		t.Fatalf("Raise must return a *fatal.Error wrapping the cause, got %v", ret)
	}
	if len(got) != 1 || !errors.Is(got[0], first) {
		t.Fatalf("handler calls = %v, want one with the first error", got)
	}
	if !errors.Is(Err(), first) {
		t.Fatalf("Err() = %v, want the first error", Err())
	}
	restore()
	if Err() != nil {
		t.Fatal("restore must clear the recorded error")
	}
}
