package schemareg

import (
	"container/list"
	"sync"
	"time"
)

// cache is a size-capped LRU of values by key: the registry's schemas by
// id or subject and version (see idKey and versionKey), the parsed ones
// by id. Each entry remembers when it was fetched, for the entries that
// may go stale (latest).
type cache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *cacheEntry
	byKey map[string]*list.Element
}

type cacheEntry[V any] struct {
	key     string
	value   V
	fetched time.Time
}

func newCache[V any](max int) *cache[V] {
	return &cache[V]{max: max, order: list.New(), byKey: make(map[string]*list.Element)}
}

// get returns the entry of key and marks it used.
func (c *cache[V]) get(key string) (V, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		var zero V
		return zero, time.Time{}, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*cacheEntry[V])
	return e.value, e.fetched, true
}

// put stores v under key, evicting the least recently used entries past
// the cap.
func (c *cache[V]) put(key string, v V, fetched time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		e := el.Value.(*cacheEntry[V])
		e.value, e.fetched = v, fetched
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry[V]{key: key, value: v, fetched: fetched})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry[V]).key)
	}
}

func (c *cache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
