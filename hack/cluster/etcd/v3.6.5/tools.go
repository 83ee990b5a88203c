//go:build tools

// Package tools keeps the etcd server command (the root package of the
// go.etcd.io/etcd/server/v3 module is etcd's main) in this module's build
// list so that `go mod tidy` retains the requirement.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
