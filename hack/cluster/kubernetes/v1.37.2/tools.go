//go:build tools

// Package tools keeps the commands build.sh builds in this module's build list, so that `go mod tidy`
// retains the k8s.io/kubernetes requirement and every dependency of those commands.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
