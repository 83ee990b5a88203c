//go:build tools

// Package tools keeps the kube-apiserver command in this module's build list
// so that `go mod tidy` retains the k8s.io/kubernetes requirement.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
