# syntax=docker/dockerfile:1@sha256:ecfaec9ed6d810b56388c508f4121597bfbba70d41a6dfeee4d8cad5f295fc32
# The outbox-relay image: a static Go binary on scratch, with CA certificates, for any
# architecture Go targets. The build stage runs on the builder's own platform and
# cross-compiles (CGO off), so a multi-architecture build needs no emulation:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -t outbox-relay .
#
# VERSION, REVISION and BUILD_DATE reach both the binary (internal/buildinfo:
# `outbox-relay version`, outbox_relay_build_info) and the OCI labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown

# Base images are pinned by digest (the multi-platform index), so a build
# takes the image that was reviewed, not whatever the tag points at today;
# the tag stays for people and for scripts/pin-images.sh, which moves the
# digests to the tags' current ones.
FROM --platform=$BUILDPLATFORM golang:1.26@sha256:3aff6657219a4d9c14e27fb1d8976c49c29fddb70ba835014f477e1c70636647 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
ARG REVISION
ARG BUILD_DATE
WORKDIR /src
# Only the root module: bench/ is a module of its own and is not in the build
# context (.dockerignore), so its dependencies never enter this stage.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
	-ldflags="-s -w \
	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.version=${VERSION} \
	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.revision=${REVISION} \
	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.date=${BUILD_DATE}" \
	-o /out/outbox-relay ./cmd/outbox-relay

FROM scratch
ARG VERSION
ARG REVISION
ARG BUILD_DATE
LABEL org.opencontainers.image.title="outbox-relay" \
	org.opencontainers.image.description="Transactional outbox relay: PostgreSQL logical replication to Kafka, at-least-once and in order per aggregate" \
	org.opencontainers.image.source="https://github.com/outbox-relay/outbox-relay" \
	org.opencontainers.image.url="https://github.com/outbox-relay/outbox-relay" \
	org.opencontainers.image.documentation="https://github.com/outbox-relay/outbox-relay/tree/main/docs" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${REVISION}" \
	org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/outbox-relay /usr/local/bin/outbox-relay
# The binary's default, 127.0.0.1:9187, is unreachable from outside a container:
# `docker run -p 9187:9187` and Kubernetes probes need all interfaces. Override
# with -e OUTBOX_RELAY_METRICS_ADDR=... (empty disables metrics and probes).
ENV OUTBOX_RELAY_METRICS_ADDR=0.0.0.0:9187
USER 65532:65532
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
