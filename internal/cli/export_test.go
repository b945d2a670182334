package cli

import "time"

// SetGaugeRefreshInterval makes serve read its database gauges every d, so
// that a test's scrape soon sees what the test did.
func SetGaugeRefreshInterval(d time.Duration) { gaugeRefreshInterval.Store(int64(d)) }
