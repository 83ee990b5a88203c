//go:build tools

// Package tools keeps the commands build.sh builds in this module's build list, so that `go mod tidy`
// retains the github.com/prometheus/prometheus requirement and every dependency of those commands.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
