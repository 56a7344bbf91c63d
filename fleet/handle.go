package fleet

import (
	"context"
	"errors"
	"os"
	"sync"
)

// RegistryHandle is a long-lived process's registry (a worker shim, a
// session holder): opened on first use and reopened whenever the file at
// its path was replaced or deleted (Registry.Stale), so that nothing is
// written to an unlinked file after the registry was rebuilt. Safe for
// concurrent use.
type RegistryHandle struct {
	path   string
	create bool
	mu     sync.Mutex
	reg    *Registry
}

// NewRegistryHandle returns a handle on the registry at path. With create
// false, Get returns nil (no error) while no registry file exists: a
// process that only reads never creates one.
func NewRegistryHandle(path string, create bool) *RegistryHandle {
	return &RegistryHandle{path: path, create: create}
}

// Get returns the open registry, opening or reopening it as needed.
func (h *RegistryHandle) Get(ctx context.Context) (*Registry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reg != nil && !h.reg.Stale() {
		return h.reg, nil
	}
	if h.reg != nil {
		h.reg.Close()
		h.reg = nil
	}
	if !h.create {
		if _, err := os.Stat(h.path); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	reg, err := OpenRegistry(ctx, h.path)
	if err != nil {
		return nil, err
	}
	h.reg = reg
	return reg, nil
}

// Close closes the open registry, if any. The handle may be used again.
func (h *RegistryHandle) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reg != nil {
		h.reg.Close()
		h.reg = nil
	}
}
