//go:build tools

// Package tools keeps the kube-apiserver and kubectl commands in this module's build list
// so that `go mod tidy` retains the k8s.io/kubernetes requirement and kubectl's dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
