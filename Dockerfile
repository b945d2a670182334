# outboxd, one static binary on a small base (busybox wget serves compose's
# health check).
#
#   docker build -t outboxd .
#   docker run --rm outboxd version

FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/outbox-dev/outbox/internal/cli.Version=${VERSION}" \
        -o /out/outboxd ./cmd/outboxd

FROM alpine:3.22
RUN addgroup -S outbox && adduser -S -G outbox outbox
COPY --from=build /out/outboxd /usr/local/bin/outboxd
USER outbox
EXPOSE 8080
# SIGTERM stops serve gracefully.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/outboxd"]
CMD ["serve"]
