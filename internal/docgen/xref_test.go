package docgen

import (
	"bytes"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

// TestNoAntoraXrefs: Benthos' own field descriptions (the batching policy's)
// hold Antora cross-references, which GitHub shows as raw text; the rendered
// pages keep their text only.
func TestNoAntoraXrefs(t *testing.T) {
	require.Equal(t, "see the batching policy.", string(unXref([]byte("see the xref:configuration:batching.adoc[batching policy]."))))
	pages, err := Render(service.GlobalEnvironment())
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for name, b := range pages {
		require.False(t, bytes.Contains(b, []byte("xref:")), "%s has an xref", name)
	}
}
