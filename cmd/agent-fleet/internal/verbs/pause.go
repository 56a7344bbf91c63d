package verbs

// Help is a CLI verb's help: its usage line, summary, description and
// examples.
type Help struct{ Use, Short, Long, Example string }

// PauseHelp is the help of pause and resume.
var PauseHelp = map[string]Help{
	"pause": {
		Use:   "pause ID",
		Short: "Freeze a worker: its processes stop where they are until resume",
		Long: `Freeze every process of a running worker of yours (the cgroup2 freezer,
through systemd where it can, else through the unit's cgroup): it uses no
CPU until agent-fleet resume, and keeps its memory. Its idle lease does not
run down meanwhile: the janitor leaves it, and resume moves the deadline on
by the time it was paused. list and status show it as paused. Its intercom
session stays registered, but it cannot read or answer messages: they wait
for it. stop still works (it thaws the worker first). Pausing a paused
worker changes nothing; one still starting or stopping exits 4.`,
		Example: "  agent-fleet pause builder\n  agent-fleet resume builder",
	},
	"resume": {
		Use:   "resume ID",
		Short: "Thaw a paused worker; its idle lease runs again",
		Long: `Let a worker that pause froze run again. Its idle lease's deadline (and a
pending checkpoint's grace) moves on by the time it was paused. Resuming a
worker that is not paused changes nothing.`,
		Example: "  agent-fleet resume builder",
	},
}
