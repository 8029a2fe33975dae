// mysqlstandin: a MySQL stand-in for offline kind clusters, one static binary called as mysqld,
// mysqladmin or mysqldump (by argv[0]). It is not a database: it does what the reference operator's
// pods ask of the real image, so real pods, probes, volumes and backup Jobs run without a registry.
//
//   - mysqld: initialises the datadir on first start (as the real entrypoint does: files that an
//     archive of the volume must contain), listens on :3306, answers PING and DUMP, and on
//     SIGTERM/SIGINT records a clean shutdown in the datadir and exits 0 (the final backup relies on
//     a cleanly stopped server).
//   - mysqladmin ping [-h HOST] [-P PORT]: exit 0 and "mysqld is alive" when the server answers.
//   - mysqldump [-h HOST] [-P PORT] ...: the server's SQL dump on stdout.
//
// Other flags (-u, --all-databases, ...) are accepted and ignored; the password is never checked.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const version = "8.0-standin"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "mysqlstandin" && len(args) > 0 { // mysqlstandin mysqld ... (handy under `docker run`)
		name, args = args[0], args[1:]
	}
	switch name {
	case "mysqld":
		os.Exit(mysqld(env("MYSQL_DATADIR", "/var/lib/mysql"), env("MYSQL_TCP_PORT", "3306")))
	case "mysqladmin":
		os.Exit(client(args, "PING", os.Stdout))
	case "mysqldump":
		os.Exit(client(args, "DUMP", os.Stdout))
	default:
		fmt.Fprintf(os.Stderr, "mysqlstandin: unknown command %q (mysqld, mysqladmin, mysqldump)\n", name)
		os.Exit(2)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func mysqld(datadir, port string) int {
	if err := initDatadir(datadir); err != nil {
		fmt.Fprintf(os.Stderr, "mysqld: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mysqld: %v\n", err)
		return 1
	}
	host, _ := os.Hostname()
	fmt.Printf("mysqld (%s) ready for connections on port %s, datadir %s\n", version, port, datadir)
	go serve(ln, host, datadir)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s := <-sigs
	ln.Close()
	state := fmt.Sprintf("clean shutdown on %s at %s\n", s, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(datadir, "shutdown.state"), []byte(state), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "mysqld: %v\n", err)
		return 1
	}
	fmt.Print("mysqld: ", state)
	return 0
}

// initDatadir writes what an initialised datadir holds, once: a restart keeps the data.
func initDatadir(dir string) error {
	marker := filepath.Join(dir, "ibdata1")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "mysql"), 0o750); err != nil {
		return err
	}
	host, _ := os.Hostname()
	files := map[string]string{
		"mysql/standin.ibd": "CREATE DATABASE standin; -- written by " + host + "\n",
		"auto.cnf":          "[auto]\nserver-uuid=" + host + "\n",
		"ibdata1":           strings.Repeat("standin-data ", 1024),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o640); err != nil {
			return err
		}
	}
	return nil
}

func serve(ln net.Listener, host, datadir string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func(c net.Conn) {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			switch strings.TrimSpace(line) {
			case "PING":
				fmt.Fprintln(c, "OK")
			case "DUMP":
				fmt.Fprintf(c, "-- MySQL dump (%s) of %s, %s\n", version, host, time.Now().UTC().Format(time.RFC3339))
				fmt.Fprintf(c, "CREATE DATABASE IF NOT EXISTS standin;\n")
				entries, _ := os.ReadDir(datadir)
				for _, e := range entries {
					fmt.Fprintf(c, "-- datadir entry: %s\n", e.Name())
				}
			default:
				fmt.Fprintln(c, "ERR unknown command")
			}
		}(conn)
	}
}

// client sends one command to the server named by -h/--host and -P/--port and copies the answer.
func client(args []string, cmd string, out *os.File) int {
	host, port := "localhost", "3306"
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "-h" || a == "--host":
			host = next()
		case strings.HasPrefix(a, "--host="):
			host = strings.TrimPrefix(a, "--host=")
		case strings.HasPrefix(a, "-h") && len(a) > 2:
			host = a[2:]
		case a == "-P" || a == "--port":
			port = next()
		case strings.HasPrefix(a, "--port="):
			port = strings.TrimPrefix(a, "--port=")
		case a == "-u" || a == "--user":
			next()
		}
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: 'Can't connect to MySQL server on '%s:%s' (%v)'\n", host, port, err)
		return 1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, cmd)
	reply := bufio.NewReader(conn)
	if cmd == "PING" {
		line, _ := reply.ReadString('\n')
		if strings.TrimSpace(line) != "OK" {
			fmt.Fprintf(os.Stderr, "error: unexpected reply %q\n", line)
			return 1
		}
		fmt.Fprintln(out, "mysqld is alive")
		return 0
	}
	if _, err := reply.WriteTo(out); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}
