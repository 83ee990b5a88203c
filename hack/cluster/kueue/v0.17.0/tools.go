//go:build tools

// Package tools keeps Kueue's manager command in this module's build list so
// that `go mod tidy` retains the sigs.k8s.io/kueue requirement.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
