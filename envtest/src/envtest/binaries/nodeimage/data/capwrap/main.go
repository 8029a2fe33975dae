// capwrap: a runc wrapper for hosts whose capability bounding set is reduced
// (e.g. no CAP_SYS_RESOURCE) and where a negative oom_score_adj cannot be set.
// For `create`/`run` (bundle config.json) and `exec --process FILE` it
//   - removes from every capability list the caps absent from our own CapBnd,
//   - clamps process.oomScoreAdj to our own /proc/self/oom_score_adj if it is lower and a probe
//     write of it to our own oom_score_adj is refused,
//
// then execs the real runc with the unchanged argv. It rewrites nothing when
// nothing needs changing (a no-op on a normal host).
// Real runc: $CAPWRAP_RUNC, else /usr/sbin/runc (or the argv0 + ".real").
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"}

func logf(format string, a ...any) {
	if p := os.Getenv("CAPWRAP_LOG"); p != "" {
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, format+"\n", a...)
			f.Close()
		}
	}
}

func capBnd() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "CapBnd:") {
			v, err := strconv.ParseUint(strings.TrimSpace(l[7:]), 16, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func ownOOM() (int, bool) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

// canLowerOOM probes whether this process may set its own oom_score_adj to v (lowering needs
// CAP_SYS_RESOURCE below the inherited minimum). On success our own score is now v, which is harmless:
// runc, our exec successor, sets the container's score to the spec value anyway.
func canLowerOOM(v int) bool {
	err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0o644)
	if err != nil {
		logf("probe oom_score_adj=%d: %v", v, err)
	}
	return err == nil
}

// fixProcess edits a runtime-spec "process" object in place; returns whether it changed.
func fixProcess(p map[string]any, bnd uint64, haveBnd bool, oom int, haveOOM bool) bool {
	changed := false
	if caps, ok := p["capabilities"].(map[string]any); ok && haveBnd {
		for k, v := range caps {
			list, ok := v.([]any)
			if !ok {
				continue
			}
			out := make([]any, 0, len(list))
			for _, c := range list {
				name, _ := c.(string)
				drop := false
				for i, n := range capNames {
					if "CAP_"+n == name && (bnd>>uint(i))&1 == 0 {
						drop = true
					}
				}
				if drop {
					logf("drop %s from %s", name, k)
					changed = true
				} else {
					out = append(out, c)
				}
			}
			caps[k] = out
		}
	}
	if v, ok := p["oomScoreAdj"].(float64); ok && haveOOM && int(v) < oom && !canLowerOOM(int(v)) {
		logf("clamp oomScoreAdj %d -> %d", int(v), oom)
		p["oomScoreAdj"] = float64(oom)
		changed = true
	}
	return changed
}

func rewrite(path string, isConfig bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		logf("read %s: %v", path, err)
		return
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		logf("parse %s: %v", path, err)
		return
	}
	bnd, hb := capBnd()
	oom, ho := ownOOM()
	proc := doc
	if isConfig {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return
		}
		proc = p
	}
	if !fixProcess(proc, bnd, hb, oom, ho) {
		return
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return
	}
	st, _ := os.Stat(path)
	mode := os.FileMode(0o644)
	if st != nil {
		mode = st.Mode().Perm()
	}
	if err := os.WriteFile(path, out, mode); err != nil {
		logf("write %s: %v", path, err)
	}
}

// global runc flags that take a value (so we can find the subcommand)
var globalWithValue = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

func main() {
	real := os.Getenv("CAPWRAP_RUNC")
	if real == "" {
		real = "/usr/sbin/runc"
	}
	args := os.Args[1:]
	logf("argv: %v", args)
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		a := args[i]
		if globalWithValue[a] && !strings.Contains(a, "=") {
			i++
		}
		i++
	}
	if i < len(args) {
		cmd, rest := args[i], args[i+1:]
		switch cmd {
		case "create", "run":
			bundle := "."
			for j := 0; j < len(rest); j++ {
				a := rest[j]
				if (a == "--bundle" || a == "-b") && j+1 < len(rest) {
					bundle = rest[j+1]
				} else if strings.HasPrefix(a, "--bundle=") {
					bundle = a[9:]
				} else if strings.HasPrefix(a, "-b=") {
					bundle = a[3:]
				}
			}
			rewrite(filepath.Join(bundle, "config.json"), true)
		case "exec":
			for j := 0; j < len(rest); j++ {
				a := rest[j]
				if (a == "--process" || a == "-p") && j+1 < len(rest) {
					rewrite(rest[j+1], false)
				} else if strings.HasPrefix(a, "--process=") {
					rewrite(a[10:], false)
				}
			}
		}
	}
	err := syscall.Exec(real, append([]string{real}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "capwrap: exec %s: %v\n", real, err)
	os.Exit(127)
}
