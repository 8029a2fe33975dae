// pause: minimal pod sandbox process. Sleeps forever, reaps zombies, exits 0 on SIGINT/SIGTERM;
// `pause -v` prints a line and exits (as the upstream pause does), which envtest uses as a probe.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" { // envtest's docker probe runs the image this way
		os.Stdout.WriteString("pause (envtest)\n")
		os.Exit(0)
	}
	if os.Getpid() != 1 {
		os.Stderr.WriteString("Warning: pause should be the first process\n")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
