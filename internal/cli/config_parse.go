package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/internal/httpapi"
)

// ParseRateLimit parses OUTBOX_RATE_LIMIT, "rps[:burst]": "10" is 10 a
// second with a burst of 10, "0.5:5" one every two seconds with a burst of 5.
// The empty string, "0" and "off" are no limit.
func ParseRateLimit(s string) (httpapi.RateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || s == "off" {
		return httpapi.RateLimit{}, nil
	}
	rpsText, burstText, hasBurst := strings.Cut(s, ":")
	rps, err := strconv.ParseFloat(rpsText, 64)
	if err != nil || math.IsNaN(rps) || math.IsInf(rps, 0) || rps <= 0 {
		return httpapi.RateLimit{}, fmt.Errorf("the rate %q is not a positive number of requests a second", rpsText)
	}
	burst := max(1, int(math.Ceil(rps)))
	if hasBurst {
		if burst, err = strconv.Atoi(burstText); err != nil || burst < 1 {
			return httpapi.RateLimit{}, fmt.Errorf("the burst %q is not a positive whole number", burstText)
		}
	}
	return httpapi.RateLimit{PerSecond: rps, Burst: burst}, nil
}

// errUnparsableDatabaseURL is parseDatabaseURL's error. It says only that
// the string could not be parsed: pgx's own error quotes the string, and
// redacts its password only as best it can.
var errUnparsableDatabaseURL = errors.New("DATABASE_URL: cannot be parsed as a Postgres connection string")

// parseDatabaseURL parses a connection string into a pool configuration.
func parseDatabaseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errUnparsableDatabaseURL
	}
	return cfg, nil
}
