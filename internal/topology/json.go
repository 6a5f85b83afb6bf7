package topology

import (
	"encoding/json"
	"io"
)

// WriteJSON writes the graph as indented JSON: the model in types.go, for
// scripts (jq) and the ui.
func WriteJSON(w io.Writer, g *Graph) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g)
}
