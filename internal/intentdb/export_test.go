package intentdb

// SQLDrainQueue is the drain's read of the dispatch queue, for its plan's
// test.
func (q *Queries) SQLDrainQueue() string { return q.sqlDrainQueue }
