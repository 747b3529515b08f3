package sqlite

import (
	"strings"
	"sync"
)

// The intent commit's statements, prepared once on the write connection
// and kept (conn.go): parsing them anew in every commit cost as much
// as running them.

const (
	// bindIntentSQL binds a request id unless it is bound already (then
	// it changes nothing: RowsAffected is 0).
	bindIntentSQL = `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (actor, request_id) DO NOTHING`
	insertIntentSQL = `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`
	insertBatchSQL = `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// taskChunk is how many task rows one INSERT writes at most; a
	// 600-task tree is ten executions, a 12-task tree one.
	taskChunk = 64
	// taskRowValues is how many values each task row binds of its own.
	taskRowValues = 5
)

// taskInsertSQL is the statement that inserts n task rows (1 <= n) of
// one batch. What every row shares is bound once, first: the batch id,
// the actor and the time (created and updated); then each row's id,
// collection, frame, generator and candidate, row after row. A text value
// costs the driver an allocation and a copy per binding, so the shared
// ones bound once make a 64-row execution bind 323 values instead of 576.
// The parameters are plain ?s: the driver looks up every parameter's name
// when it binds, which is linear in the named (?NNN) ones.
func taskInsertSQL(n int) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO tasks (id, batch_id, actor, collection, frame, generator, candidate, created_at, updated_at)
		SELECT v.column1, s.batch_id, s.actor, v.column2, v.column3, v.column4, v.column5, s.at, s.at
		FROM (SELECT ? AS batch_id, ? AS actor, ? AS at) AS s, (VALUES `)
	for i := 0; i < n; i++ {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?)")
	}
	q.WriteString(`) AS v`)
	return q.String()
}

// taskInsertSQLs are taskInsertSQL(n) for each n from 1 to taskChunk.
var taskInsertSQLs = sync.OnceValue(func() []string {
	qs := make([]string, taskChunk+1)
	for n := 1; n <= taskChunk; n++ {
		qs[n] = taskInsertSQL(n)
	}
	return qs
})
