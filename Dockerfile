# syntax=docker/dockerfile:1
# Multi-stage build of the outbox-relay binary: static Go build, distroless runtime.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/outbox-relay ./cmd/outbox-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox-relay /usr/local/bin/outbox-relay
USER nonroot:nonroot
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
