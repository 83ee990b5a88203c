//go:build tools

// Package tools keeps the commands build.sh builds in this module's build list, so that `go mod tidy`
// retains the go.etcd.io/etcd/server/v3 requirement and every dependency of those commands.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
