package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// DefaultNkeyFile is the nkey seed node key and node init --embedded
// make when told no file: <intercom dir>/node.nk.
func DefaultNkeyFile(p intercom.Paths) string { return filepath.Join(p.Dir, "node.nk") }

// KeyReport is what node key made or found, as --json prints it.
type KeyReport struct {
	File string `json:"file"`
	// PublicKey is the seed's public user nkey ("U…", 56 characters): what
	// an embedded server lists in embedded.nkeys (node init --allow-nkey).
	PublicKey string `json:"publicKey"`
	// Created is false when the file existed and was kept.
	Created bool `json:"created"`
}

// MakeNkey writes a new user nkey seed to file (0600, its directory 0700)
// and returns it with its public key. An existing file is kept and its
// public key returned (Created false); one that holds no user seed is an
// error.
func MakeNkey(file string) (*KeyReport, error) {
	if pub, err := NkeyPublic(file); err == nil {
		return &KeyReport{File: file, PublicKey: pub}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(file), intercom.DirMode); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, intercom.FileMode)
	if err != nil {
		return nil, fmt.Errorf("write nkey seed: %w", err)
	}
	_, err = f.Write(append(seed, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write nkey seed: %w", err)
	}
	return &KeyReport{File: file, PublicKey: pub, Created: true}, nil
}

// NkeyPublic reads a user nkey seed file and returns its public key. A
// missing file wraps fs.ErrNotExist.
func NkeyPublic(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedUserNKey(bytes.TrimSpace(data))
	if err != nil {
		return "", fmt.Errorf("%s holds no user nkey seed: %w", file, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	return pub, nil
}
