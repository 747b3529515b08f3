package sqlite

import (
	"strings"
	"sync"

	"studio/intent"
)

// The intent commit's statements, prepared once on the write connection
// and kept (writetx.go): parsing them anew in every commit cost as much
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

// cacheEntries bounds each of the store's caches (bindings, tokens).
const cacheEntries = 1 << 14

// bindingCache remembers bindings this process read or committed. A
// binding never changes and is never deleted once committed, by this
// process or any other on the file, so a remembered one is always
// current: a replay then reads only its batch. Only committed bindings go
// in (after the commit, or read from the database); a miss reads the
// database. At most max entries; when full, an arbitrary one makes room.
type bindingCache struct {
	mu  sync.Mutex
	m   map[bindingKey]intent.Binding
	max int
}

type bindingKey struct{ actor, requestID string }

func (c *bindingCache) get(actor, requestID string) (intent.Binding, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[bindingKey{actor, requestID}]
	return b, ok
}

func (c *bindingCache) add(b intent.Binding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[bindingKey]intent.Binding)
	}
	k := bindingKey{b.Actor, b.RequestID}
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = b
}

// tokenCache remembers the actor of token hashes found in the database. A
// token is never deleted nor moved to another actor, so a remembered one
// stays right; at most max entries.
type tokenCache struct {
	mu  sync.Mutex
	m   map[string]string
	max int
}

func (c *tokenCache) get(hash string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[hash]
	return a, ok
}

func (c *tokenCache) add(hash, actor string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]string)
	}
	if _, ok := c.m[hash]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[hash] = actor
}
