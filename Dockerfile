# The operator image, for users with a Docker engine. `make image` builds the same image without one
# (hack/image/build.sh: mmdebstrap + umoci).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gpuctl ./gpuctl
RUN python -m venv /opt/gpuctl && /opt/gpuctl/bin/pip install --no-cache-dir .

FROM python:3.11-slim-bookworm
COPY --from=build /opt/gpuctl /opt/gpuctl
RUN echo "gpuctl:x:65532:65532:gpuctl:/nonexistent:/usr/sbin/nologin" >> /etc/passwd && echo "gpuctl:x:65532:" >> /etc/group
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["/opt/gpuctl/bin/gpuctl-operator"]
