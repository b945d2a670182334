package outbox

// SetGroupHook has c report, after each group's statement, the keys of the
// calls it carried and its error.
func SetGroupHook(c *Client, f func(keys []string, err error)) {
	c.groupHook = func(calls []*groupCall, err error) {
		keys := make([]string, len(calls))
		for i, call := range calls {
			keys[i] = call.row.Key
		}
		f(keys, err)
	}
}
