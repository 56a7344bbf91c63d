package broker

import "os"

// ActivateWith makes the next ListenAndServe see files as the sockets
// systemd passed it, once (as Files(true) clears LISTEN_FDS); restore
// undoes it if no ListenAndServe took them.
func ActivateWith(files []*os.File) (restore func()) {
	old := activationFiles
	activationFiles = func() []*os.File {
		activationFiles = old
		return files
	}
	return func() { activationFiles = old }
}
