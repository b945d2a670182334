// Package deploy holds what operators plug outbox into, as files rather than
// code: a Grafana dashboard (grafana/outbox.json), Prometheus alert rules
// with their promtool unit tests (prometheus/), and Kubernetes manifests
// (kubernetes/). docs/operations.md explains each.
//
// The package has no Go API. Its tests keep the files true to the program:
// every metric a panel or an alert names is one a real serve exports, the
// alert rules pass promtool's unit tests, and every manifest decodes strictly
// into Kubernetes' types and sets only variables serve reads.
package deploy
