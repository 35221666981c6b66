package schemareg

import (
	"container/list"
	"sync"
	"time"
)

// cache is a size-capped LRU of schemas by key (an id or a subject and
// version, see idKey and versionKey). Each entry remembers when it was
// fetched, for the entries that may go stale (latest).
type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *cacheEntry
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key     string
	schema  *Schema
	fetched time.Time
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), byKey: make(map[string]*list.Element)}
}

// get returns the entry of key and marks it used.
func (c *cache) get(key string) (*Schema, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, time.Time{}, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	return e.schema, e.fetched, true
}

// put stores s under key, evicting the least recently used entries past
// the cap.
func (c *cache) put(key string, s *Schema, fetched time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		e := el.Value.(*cacheEntry)
		e.schema, e.fetched = s, fetched
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, schema: s, fetched: fetched})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
