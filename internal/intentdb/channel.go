package intentdb

import (
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyWindow is how long a session stays quiet after an enqueue notified
// the drain. A notifying commit holds a database-wide lock until it is
// durable, so one notification per enqueue tripled the caller's commit time;
// the drain polls every few milliseconds while work flows, which catches the
// enqueues that skip their notification (see docs/design.md).
const NotifyWindow = time.Second

// ChannelPending is the notification channel on which every enqueue that
// creates an intent in schema wakes the dispatcher's drain. Its payload is
// empty.
func ChannelPending(schema string) string { return schema + ".intent_pending" }

// ChannelChanged is the notification channel that carries every intent state
// change in schema. A payload is "<state> <id>[,<id>...]" (see ParseChanged;
// an approval says ChangeApproved):
// one notification covers every intent of a batch that moved to that state.
func ChannelChanged(schema string) string { return schema + ".intent_changed" }

// notifiedSetting is the session setting in which an enqueue remembers when
// its session last notified the drain.
func notifiedSetting(schema string) string { return "outbox.notified_" + schema }

// chunkIDs is how many ids one state-change notification carries at most,
// which keeps each payload under Postgres's 8000-byte limit.
const chunkIDs = 300

// ParseChanged parses a state-change payload, "<state> <id>[,<id>...]". ok is
// false for a payload of another form.
func ParseChanged(payload string) (state string, ids []int64, ok bool) {
	state, list, ok := strings.Cut(payload, " ")
	if !ok {
		return "", nil, false
	}
	ids = make([]int64, 0, strings.Count(list, ",")+1)
	for list != "" {
		var next string
		next, list, _ = strings.Cut(list, ",")
		if id, err := strconv.ParseInt(next, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return state, ids, true
}

// Render fills the placeholders of a statement or migration for schema:
// {{schema}} (the quoted schema), {{channel_pending}}, {{channel_changed}}
// and {{guc_notified}} (as the contents of string literals), and
// {{notify_window}} (an interval literal's contents).
func Render(sql, schema string) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{channel_pending}}", literal(ChannelPending(schema)),
		"{{channel_changed}}", literal(ChannelChanged(schema)),
		"{{guc_notified}}", literal(notifiedSetting(schema)),
		"{{notify_window}}", NotifyWindow.String(),
		"{{chunk}}", strconv.Itoa(chunkIDs),
	).Replace(sql)
}

// literal escapes s for the inside of a SQL string literal. Schemas are
// restricted to [a-z0-9_] by the migrator, so this is belt and braces.
func literal(s string) string { return strings.ReplaceAll(s, "'", "''") }
