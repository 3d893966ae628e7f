package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPrintPlans prints the plans of SIM_PLANS (comma-separated seeds).
func TestPrintPlans(t *testing.T) {
	v := os.Getenv("SIM_PLANS")
	if v == "" {
		t.Skip("SIM_PLANS not set")
	}
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%d: %s\n", n, Draw(n))
	}
}
