package controllers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// NewMetadataClient is the client the garbage collector lists, watches,
// patches and deletes every kind of object with: client-go's metadata
// client, over a transport that also copes with an API server that does not
// implement the PartialObjectMetadata form of responses (ours sends whole
// objects). client-go falls back on its own for single objects and lists;
// it cannot for watch events, so the transport rewrites the objects in a
// watch stream to PartialObjectMetadata when the server did not.
func NewMetadataClient(cfg *rest.Config) (metadata.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return metadataWatch{rt} })
	md, err := metadata.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	return md, nil
}

// metadataWatch is the RoundTripper that rewrites watch streams.
type metadataWatch struct{ rt http.RoundTripper }

func (m metadataWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := m.rt.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK || r.URL.Query().Get("watch") != "true" ||
		!strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	if strings.Contains(ct, "as=PartialObjectMetadata") || !strings.HasPrefix(ct, "application/json") {
		return resp, nil // the server did it, or sent what we cannot read either
	}
	pr, pw := io.Pipe()
	go rewriteWatch(resp.Body, pw)
	resp.Body = &pipeBody{PipeReader: pr, orig: resp.Body}
	return resp, nil
}

// pipeBody closes the server's body with the pipe, which ends rewriteWatch.
type pipeBody struct {
	*io.PipeReader
	orig io.Closer
}

func (b *pipeBody) Close() error {
	b.PipeReader.Close()
	return b.orig.Close()
}

// rewriteWatch copies watch events from in to out with their objects cut
// down to PartialObjectMetadata (ERROR events carry a Status: kept as is).
func rewriteWatch(in io.ReadCloser, out *io.PipeWriter) {
	defer in.Close()
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF // the server ended the watch mid-event: end it here too
			}
			out.CloseWithError(err)
			return
		}
		if ev.Type != "ERROR" {
			var pm metav1.PartialObjectMetadata
			if err := json.Unmarshal(ev.Object, &pm); err != nil {
				out.CloseWithError(fmt.Errorf("decoding the metadata of a watch event: %w", err))
				return
			}
			pm.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "PartialObjectMetadata"}
			ev.Object, _ = json.Marshal(&pm)
		}
		if err := enc.Encode(&ev); err != nil {
			out.CloseWithError(err)
			return
		}
	}
}
