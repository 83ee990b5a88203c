//go:build tools

// Package tools keeps krew's command in this module's build list so that
// `go mod tidy` retains the sigs.k8s.io/krew requirement.
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
)
