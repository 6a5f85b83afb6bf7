// Command lister is the controller of the accounts test's install manifest:
// run by a Deployment under its own ServiceAccount, it lists the custom
// resource named by its arguments (GROUP VERSION RESOURCE) cluster-wide with
// rest.InClusterConfig every half second, as a controller's informer would,
// and prints each outcome when it changes: "list: <the server's error>" or
// "listed <resource>: <names>". It runs until its pod is deleted.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Println("usage: lister GROUP VERSION RESOURCE")
		os.Exit(2)
	}
	gvr := schema.GroupVersionResource{Group: os.Args[1], Version: os.Args[2], Resource: os.Args[3]}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Println("in-cluster config:", err)
		os.Exit(2)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Println("client:", err)
		os.Exit(2)
	}
	last := ""
	for {
		var line string
		list, err := dc.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			line = fmt.Sprint("list: ", err)
		} else {
			var names []string
			for _, it := range list.Items {
				names = append(names, it.GetNamespace()+"/"+it.GetName())
			}
			slices.Sort(names)
			line = fmt.Sprintf("listed %s: %s", gvr.Resource, strings.Join(names, ","))
		}
		if line != last {
			fmt.Println(line)
			last = line
		}
		time.Sleep(500 * time.Millisecond)
	}
}
