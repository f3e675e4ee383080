// Stand-ins for the catalog functions Porch's end-to-end suite names but the
// Go module proxy does not serve (set-labels, set-annotations, search-replace,
// ensure-name-substring). One program; it acts as the function its file is
// named after. Each does what the suite's assertions check, from a ConfigMap
// functionConfig's data, and nothing more:
//
//	set-labels             every item gets each data key as a label
//	set-annotations        every item gets each data key as an annotation
//	search-replace         every scalar field value equal to `by-value`
//	                       becomes `put-value` (keys are left alone)
//	ensure-name-substring  every item's name ends with `append` (appended
//	                       once)
//
// The same binaries run behind both function runners in
// tests/beds/porch_suite.rs; scripts/build-porch-e2e.sh builds them with
// kyaml's function framework from Porch's module graph.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

func main() {
	name := filepath.Base(os.Args[0])
	processor := framework.ResourceListProcessorFunc(func(rl *framework.ResourceList) error {
		data := map[string]string{}
		if rl.FunctionConfig != nil {
			data = rl.FunctionConfig.GetDataMap()
		}
		for _, item := range rl.Items {
			if err := standIn(name, data, item); err != nil {
				return err
			}
		}
		return nil
	})
	if err := framework.Execute(processor, nil); err != nil {
		os.Exit(1)
	}
}

func standIn(name string, data map[string]string, item *yaml.RNode) error {
	switch name {
	case "set-labels":
		labels := item.GetLabels()
		for k, v := range data {
			labels[k] = v
		}
		return item.SetLabels(labels)
	case "set-annotations":
		for k, v := range data {
			if err := item.PipeE(yaml.SetAnnotation(k, v)); err != nil {
				return err
			}
		}
		return nil
	case "search-replace":
		by, put := data["by-value"], data["put-value"]
		if by == "" {
			return fmt.Errorf("search-replace stand-in: by-value is required")
		}
		replaceValues(item.YNode(), by, put)
		return nil
	case "ensure-name-substring":
		suffix := data["append"]
		if n := item.GetName(); !strings.HasSuffix(n, suffix) {
			return item.SetName(n + suffix)
		}
		return nil
	default:
		return fmt.Errorf("no stand-in is named %q (set-labels, set-annotations, search-replace, ensure-name-substring)", name)
	}
}

// replaceValues sets every scalar value (not mapping key) equal to by to put.
func replaceValues(n *yaml.Node, by, put string) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			replaceValues(c, by, put)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			replaceValues(n.Content[i], by, put)
		}
	case yaml.ScalarNode:
		if n.Value == by {
			n.Value = put
		}
	}
}
