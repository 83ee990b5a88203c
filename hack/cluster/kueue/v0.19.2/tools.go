//go:build tools

// Package tools keeps the commands build.sh builds in this module's build list, so that `go mod tidy`
// retains the sigs.k8s.io/kueue requirement and every dependency of those commands.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
