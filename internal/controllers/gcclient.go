package controllers

import (
	"fmt"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// NewMetadataClient is the client the garbage collector lists, watches,
// patches and deletes every kind of object with: client-go's metadata
// client, which the API server answers with PartialObjectMetadata.
func NewMetadataClient(cfg *rest.Config) (metadata.Interface, error) {
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	return md, nil
}
