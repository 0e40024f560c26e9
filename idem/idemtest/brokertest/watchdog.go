package brokertest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// watchdogScript waits for its standard input to close (the test binary's
// end of a pipe: closed when the binary exits, however it exits), then stops
// a throwaway server as its Stop would: SIGTERM to the server ($1), SIGKILL
// to its process group after 20s, then a helper process ($2, may be empty),
// then removes its directory ($3). It signals a pid only while the process
// there started when the server ($4) or the helper ($5) did: a server that
// exited on its own leaves its pid to be reused, and the watchdog must not
// signal whatever process has it now.
const watchdogScript = `read _ || true
same() { [ -n "$2" ] && [ "$(cut -d' ' -f22 /proc/"$1"/stat 2>/dev/null)" = "$2" ]; }
if same "$1" "$4"; then
	kill -TERM "$1" 2>/dev/null
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 20 ]; do sleep 1; i=$((i + 1)); done
	kill -KILL -- "-$1" 2>/dev/null
fi
[ -z "$2" ] || ! same "$2" "$5" || kill "$2" 2>/dev/null
rm -rf "$3"
`

// A watchdog stops a throwaway server that the test binary started when the
// binary exits without stopping it: a panic, a timeout, SIGKILL.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // the binary's end; the kernel closes it when the binary exits
}

// startWatchdog starts the watchdog of the server with pid (the leader of its
// own process group), helper (0 for none) and dir.
func startWatchdog(name string, pid, helper int, dir string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	helperArg := ""
	if helper != 0 {
		helperArg = strconv.Itoa(helper)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, name, strconv.Itoa(pid), helperArg, dir, startTime(pid), startTime(helper))
	cmd.Stdin = r
	// Not in the test binary's process group: a Ctrl-C that ends the tests
	// must not end the watchdog too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// disarm ends the watchdog without letting it act: the caller stops the
// server itself and reaps its processes, whose pids the watchdog must not
// signal afterwards.
func (w *watchdog) disarm() {
	if w == nil {
		return
	}
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	w.pipe.Close()
}

// startTime is when the process pid started, in clock ticks since boot (the
// 22nd field of /proc/pid/stat), or "" when it cannot be read: with "" the
// watchdog signals nothing. The process names of the servers hold no space,
// so the fields split on spaces.
func startTime(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(b))
	if len(fields) < 22 {
		return ""
	}
	return fields[21]
}
