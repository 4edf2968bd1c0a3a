// Command kstatus prints what the kstatus library (sigs.k8s.io/cli-utils), the library Flux,
// kpt and cli-utils judge resources with, computes for each object of a JSON list read from
// stdin: one JSON line per object, {"name", "status", "message"}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	var objects []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&objects); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: stdin is not a JSON list of objects:", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, object := range objects {
		// Unstructured's own decoding keeps integers int64, as kstatus reads them.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(object); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus: not a Kubernetes object:", err)
			os.Exit(2)
		}
		result, err := status.Compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", u.GetName(), err)
			os.Exit(1)
		}
		line := map[string]string{
			"name": u.GetName(), "status": string(result.Status), "message": result.Message,
		}
		if err := out.Encode(line); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
	}
}
