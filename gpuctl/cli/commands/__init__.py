"""The commands of gpuctl, one module per command or group of commands."""
