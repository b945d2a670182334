package cli

import "time"

// SetGaugeRefreshInterval makes serve read its database gauges every d, so
// that a test's scrape soon sees what the test did.
func SetGaugeRefreshInterval(d time.Duration) { gaugeRefreshInterval.Store(int64(d)) }

// ResolveCommand is the curl command the demo prints for resolving the email
// it left unknown.
var ResolveCommand = resolveCommand

// SetUpstreamAgreeInterval sets how often serve reads the upstreams'
// recorded locks.
func SetUpstreamAgreeInterval(d time.Duration) { upstreamAgreeInterval.Store(int64(d)) }
