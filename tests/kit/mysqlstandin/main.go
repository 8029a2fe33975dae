// mysqlstandin: a MySQL stand-in for offline kind clusters, one static binary called as mysqld,
// mysqladmin, mysqldump or mysql (by argv[0]). It is not a database: it does what the reference
// operator's pods ask of the real image, so real pods, probes, the replication sidecar, volumes,
// replicas and backup Jobs run without a registry.
//
//   - mysqld: as the image's entrypoint does, initialises the datadir on first start (files an archive
//     of the volume must contain) and then runs /docker-entrypoint-initdb.d/*.sh (sourced by sh with a
//     `docker_process_sql` function that pipes SQL to `mysql` over the local socket) and *.sql; a
//     failing script stops it, as `set -e` in the entrypoint does. Reads server-id, read-only and
//     super-read-only from /etc/mysql/conf.d/*.cnf, again after the init scripts (the real server
//     starts anew after its init phase). Listens on :3306 but answers over TCP only once initialised
//     (the real image keeps networking off until then; only the init scripts' socket calls work).
//     On SIGTERM/SIGINT records a clean shutdown in the datadir and exits 0 (the final backup relies
//     on a cleanly stopped server).
//   - mysql [-h HOST] [-P PORT] [-S SOCKET] [-e SQL]: SQL from -e or stdin to the server; it
//     understands CHANGE REPLICATION SOURCE TO (SOURCE_HOST, SOURCE_PORT) and CHANGE MASTER TO
//     (MASTER_HOST, MASTER_PORT), START/STOP REPLICA|SLAVE, RESET REPLICA|SLAVE ALL, SET [PERSIST|GLOBAL]
//     var = value (persisted ones survive restarts, as mysqld-auto.cnf does; super_read_only on sets
//     read_only on, read_only off sets super_read_only off, as on the real server), SELECT @@var (a
//     switch as 1 or 0, as the real server prints it), SELECT <number>, and SHOW REPLICA
//     STATUS (Replica_*/Source_* names) or SHOW SLAVE STATUS (Slave_*/Master_*, as MariaDB prints
//     it); any other statement (CREATE USER, GRANT, ...) is accepted and ignored. A started replica
//     connects to its source and logs whether it reaches it: the evidence that replica wiring (DNS,
//     ports, the sidecar) works on a real cluster.
//   - mysqladmin ping [-h HOST] [-P PORT]: exit 0 and "mysqld is alive" when the server answers.
//   - mysqldump [-h HOST] [-P PORT] ...: the server's SQL dump on stdout.
//
// The port defaults to $MYSQL_TCP_PORT, then 3306, as the real clients' does. Other flags (-u, -N,
// --all-databases, ...) are accepted and ignored; the password is never checked.
package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
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
		os.Exit(client(args, "PING", nil, os.Stdout))
	case "mysqldump":
		os.Exit(client(args, "DUMP", nil, os.Stdout))
	case "mysql":
		os.Exit(mysqlClient(args))
	default:
		fmt.Fprintf(os.Stderr, "mysqlstandin: unknown command %q (mysqld, mysqladmin, mysqldump, mysql)\n", name)
		os.Exit(2)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func logf(format string, a ...any) {
	fmt.Printf("mysqld: "+format+"\n", a...)
}

// -- the server ----------------------------------------------------------------------------------

type server struct {
	datadir  string
	host     string
	mu       sync.Mutex
	ready    bool
	vars     map[string]string // SET / SET PERSIST; server_id from the config
	source   string            // host:port of CHANGE REPLICATION SOURCE TO; "" when not a replica
	ioState  string            // replica IO thread: "No", "Connecting", "Yes"
	stopRepl chan struct{}
}

const (
	persistFile = "mysqld-auto.cnf" // SET PERSIST values, as the real server keeps them
	replicaFile = "replica.info"    // source host:port and whether replication was started
)

func mysqld(datadir, port string) int {
	host, _ := os.Hostname()
	s := &server{datadir: datadir, host: host, vars: map[string]string{}, ioState: "No"}
	confDir := env("MYSQL_CONF_DIR", "/etc/mysql/conf.d")
	s.loadConfig(confDir)
	logf("%s starting, server-id %s", version, s.vars["server_id"])
	if err := becomeMySQLUser(datadir); err != nil {
		logf("%v", err)
		return 1
	}
	fresh, err := initDatadir(datadir)
	if err != nil {
		logf("%v", err)
		return 1
	}
	s.loadPersisted()
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		logf("%v", err)
		return 1
	}
	go s.serve(ln)
	if fresh {
		if err := runInitScripts(env("MYSQL_INITDB_DIR", "/docker-entrypoint-initdb.d"), port); err != nil {
			logf("init script failed: %v", err)
			return 1
		}
		// The real image stops its init server and starts the real one: the config is read anew
		// (an init script may have added to it), then what was persisted.
		s.mu.Lock()
		s.loadConfig(confDir)
		s.loadPersistedVars()
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	logf("ready for connections on port %s, datadir %s, read_only=%s", port, datadir, s.variable("read_only"))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sig := <-sigs
	ln.Close()
	state := fmt.Sprintf("clean shutdown on %s at %s\n", sig, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(datadir, "shutdown.state"), []byte(state), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	fmt.Print("mysqld: ", state)
	return 0
}

// becomeMySQLUser does what the official images' entrypoint does before it starts the server (chown
// the datadir, then `gosu mysql`): started as root, the server runs as the image's mysql user, so the
// datadir is that user's, as the backup pods (restricted, run as the datadir's owner) expect. No mysql
// user in the image, or not root: nothing changes.
func becomeMySQLUser(datadir string) error {
	if os.Getuid() != 0 {
		return nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("mysql user %s:%s: not numeric", u.Uid, u.Gid)
	}
	err = filepath.WalkDir(datadir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("chown %s to mysql: %w", datadir, err)
	}
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	logf("running as mysql (%d:%d)", uid, gid)
	return nil
}

var configLine = regexp.MustCompile(`(?m)^\s*(server[-_]id|read[-_]only|super[-_]read[-_]only)\s*=\s*(\w+)\s*$`)

// loadConfig sets server_id, read_only and super_read_only from the config dir's *.cnf files, the
// last setting winning (the real server's defaults: 1, OFF, OFF). super_read_only implies read_only,
// as on the real server. Called before serving or with s.mu held.
func (s *server) loadConfig(confDir string) {
	s.vars["server_id"] = "1"
	files, _ := filepath.Glob(filepath.Join(confDir, "*.cnf"))
	sort.Strings(files)
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range configLine.FindAllStringSubmatch(string(body), -1) {
			s.vars[strings.ReplaceAll(strings.ToLower(m[1]), "-", "_")] = onOff(m[2])
		}
	}
	if s.vars["super_read_only"] == "ON" {
		s.vars["read_only"] = "ON"
	}
}

func onOff(value string) string {
	switch strings.ToUpper(value) {
	case "1", "ON", "TRUE":
		return "ON"
	case "0", "OFF", "FALSE":
		return "OFF"
	}
	return value
}

// initDatadir writes what an initialised datadir holds, once (true then): a restart keeps the data.
func initDatadir(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "ibdata1")); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "mysql"), 0o750); err != nil {
		return false, err
	}
	host, _ := os.Hostname()
	files := map[string]string{
		"mysql/standin.ibd": "CREATE DATABASE standin; -- written by " + host + "\n",
		"auto.cnf":          "[auto]\nserver-uuid=" + host + "\n",
		"ibdata1":           strings.Repeat("standin-data ", 1024),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o640); err != nil {
			return false, err
		}
	}
	logf("initialised datadir %s", dir)
	return true, nil
}

// runInitScripts does what the image's entrypoint does with its initdb dir on first start.
func runInitScripts(dir, port string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	self, _ := os.Executable()
	// The entrypoint's helper, pointed at this server (the real one uses the init server's socket).
	helper := fmt.Sprintf(`docker_process_sql() { %q mysql -h 127.0.0.1 -P %s -S init.sock -u root "$@"; }`, self, port)
	for _, e := range entries { // ReadDir sorts by name, as the entrypoint's glob does
		path := filepath.Join(dir, e.Name())
		var cmd *exec.Cmd
		switch filepath.Ext(e.Name()) {
		case ".sh":
			cmd = exec.Command("sh", "-ec", helper+"\n. \"$1\"", "sh", path)
		case ".sql":
			cmd = exec.Command(self, "mysql", "-h", "127.0.0.1", "-P", port)
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			cmd.Stdin = f
		default:
			logf("ignoring %s", path)
			continue
		}
		logf("running %s", path)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
	}
	return nil
}

func (s *server) variable(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.vars[name]; ok {
		return v
	}
	return "OFF"
}

func (s *server) loadPersisted() {
	s.loadPersistedVars()
	if body, err := os.ReadFile(filepath.Join(s.datadir, replicaFile)); err == nil {
		fields := strings.Fields(string(body))
		if len(fields) == 2 {
			s.source = fields[0]
			if fields[1] == "started" {
				s.startReplica()
			}
		}
	}
}

func (s *server) loadPersistedVars() {
	if body, err := os.ReadFile(filepath.Join(s.datadir, persistFile)); err == nil {
		for _, line := range strings.Split(string(body), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				s.vars[k] = v
			}
		}
	}
}

func (s *server) persist() error {
	var lines []string
	for k, v := range s.vars {
		if k != "server_id" {
			lines = append(lines, k+"="+v)
		}
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(s.datadir, persistFile), []byte(strings.Join(lines, "\n")+"\n"), 0o640)
}

func (s *server) saveReplica(started bool) error {
	state := "stopped"
	if started {
		state = "started"
	}
	return os.WriteFile(filepath.Join(s.datadir, replicaFile), []byte(s.source+" "+state+"\n"), 0o640)
}

// startReplica runs the IO thread: it dials the source until stopped and logs each change of state.
// Called with s.mu held or before serving.
func (s *server) startReplica() {
	if s.stopRepl != nil {
		return
	}
	stop := make(chan struct{})
	s.stopRepl, s.ioState = stop, "Connecting"
	source := s.source
	logf("replica of %s: starting", source)
	go func() {
		last := ""
		for {
			state, detail := "Yes", "connected, IO thread running"
			if err := ping(source); err != nil {
				state, detail = "Connecting", "cannot reach the source ("+err.Error()+"), retrying"
			}
			s.mu.Lock()
			s.ioState = state
			s.mu.Unlock()
			if state != last { // one line per change, not one per attempt
				logf("replica of %s: %s", source, detail)
			}
			last = state
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(conn, "PING")
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if strings.TrimSpace(line) != "OK" {
		return fmt.Errorf("source not ready: %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *server) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go s.handle(conn)
	}
}

func (s *server) handle(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	line, _ := r.ReadString('\n')
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	switch cmd := strings.TrimSpace(line); {
	case cmd == "PING" && !ready:
		fmt.Fprintln(c, "ERR initializing")
	case cmd == "PING":
		fmt.Fprintln(c, "OK")
	case cmd == "DUMP":
		fmt.Fprintf(c, "-- MySQL dump (%s) of %s, %s\n", version, s.host, time.Now().UTC().Format(time.RFC3339))
		fmt.Fprintf(c, "CREATE DATABASE IF NOT EXISTS standin;\n")
		entries, _ := os.ReadDir(s.datadir)
		for _, e := range entries {
			fmt.Fprintf(c, "-- datadir entry: %s\n", e.Name())
		}
	case cmd == "SQL" && !ready: // networking is off during the init phase: only the socket answers
		fmt.Fprintln(c, "ERR 2003 (HY000): Can't connect to MySQL server (initializing)")
	case cmd == "SQL", cmd == "SOCKET-SQL":
		body, _ := io.ReadAll(r)
		out, err := s.execute(string(body))
		if err != nil {
			fmt.Fprintf(c, "ERR %v\n", err)
			return
		}
		fmt.Fprint(c, "OK\n"+out)
	default:
		fmt.Fprintln(c, "ERR unknown command")
	}
}

var (
	sourceHost   = regexp.MustCompile(`(?i)\b(?:SOURCE|MASTER)_HOST\s*=\s*'([^']*)'`)
	sourcePort   = regexp.MustCompile(`(?i)\b(?:SOURCE|MASTER)_PORT\s*=\s*(\d+)`)
	setVar       = regexp.MustCompile(`(?i)^SET\s+(PERSIST\s+|GLOBAL\s+)?@*(\w+)\s*=\s*'?(\w+)'?$`)
	selectVar    = regexp.MustCompile(`(?i)^SELECT\s+@@(?:GLOBAL\.)?(\w+)$`)
	selectNumber = regexp.MustCompile(`^SELECT\s+(\d+)$`)
)

// execute runs the statements of one client call; the output is what `mysql` prints.
func (s *server) execute(sql string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out strings.Builder
	for _, stmt := range strings.Split(sql, ";") {
		stmt = strings.Join(strings.Fields(stmt), " ")
		upper := strings.ToUpper(stmt)
		switch {
		case stmt == "":
		case strings.HasPrefix(upper, "CHANGE REPLICATION SOURCE TO"), strings.HasPrefix(upper, "CHANGE MASTER TO"):
			m := sourceHost.FindStringSubmatch(stmt)
			if m == nil || m[1] == "" {
				return "", fmt.Errorf("CHANGE REPLICATION SOURCE|MASTER TO without SOURCE_HOST|MASTER_HOST: %s", stmt)
			}
			port := "3306"
			if p := sourcePort.FindStringSubmatch(stmt); p != nil {
				port = p[1]
			}
			s.source = net.JoinHostPort(m[1], port)
			if err := s.saveReplica(false); err != nil {
				return "", err
			}
			logf("replication source set to %s", s.source)
		case upper == "START REPLICA", upper == "START SLAVE":
			if s.source == "" {
				return "", fmt.Errorf("START REPLICA before CHANGE REPLICATION SOURCE TO")
			}
			if err := s.saveReplica(true); err != nil {
				return "", err
			}
			s.startReplica()
		case upper == "STOP REPLICA", upper == "STOP SLAVE":
			if s.stopRepl != nil {
				close(s.stopRepl)
				s.stopRepl, s.ioState = nil, "No"
			}
			if s.source != "" {
				if err := s.saveReplica(false); err != nil {
					return "", err
				}
			}
		case upper == "RESET REPLICA ALL", upper == "RESET SLAVE ALL":
			if s.stopRepl != nil {
				close(s.stopRepl)
				s.stopRepl, s.ioState = nil, "No"
			}
			s.source = ""
			if err := os.Remove(filepath.Join(s.datadir, replicaFile)); err != nil && !os.IsNotExist(err) {
				return "", err
			}
			logf("replication reset: no source")
		case strings.HasPrefix(upper, "SHOW REPLICA STATUS"), strings.HasPrefix(upper, "SHOW SLAVE STATUS"):
			if s.source != "" {
				host, port, _ := net.SplitHostPort(s.source)
				sqlRunning := "No"
				if s.stopRepl != nil {
					sqlRunning = "Yes"
				}
				replica, source := "Replica", "Source" // MySQL's names; MariaDB keeps the old ones
				if strings.HasPrefix(upper, "SHOW SLAVE") {
					replica, source = "Slave", "Master"
				}
				fmt.Fprintf(&out, "%s_Host: %s\n%s_Port: %s\n", source, host, source, port)
				fmt.Fprintf(&out, "%s_IO_Running: %s\n%s_SQL_Running: %s\n", replica, s.ioState, replica, sqlRunning)
				fmt.Fprintf(&out, "Auto_Position: 1\n")
			}
		default:
			if m := setVar.FindStringSubmatch(stmt); m != nil {
				name, value := strings.ToLower(m[2]), strings.ToUpper(m[3])
				value = onOff(value)
				s.vars[name] = value
				switch {
				case name == "super_read_only" && value == "ON":
					s.vars["read_only"] = "ON"
				case name == "read_only" && value == "OFF":
					s.vars["super_read_only"] = "OFF"
				}
				if strings.EqualFold(strings.TrimSpace(m[1]), "PERSIST") {
					if err := s.persist(); err != nil {
						return "", err
					}
					logf("persisted %s=%s", name, value)
				}
			} else if m := selectNumber.FindStringSubmatch(stmt); m != nil {
				fmt.Fprintf(&out, "%s\n", m[1])
			} else if m := selectVar.FindStringSubmatch(stmt); m != nil {
				v, ok := s.vars[strings.ToLower(m[1])]
				switch {
				case !ok, v == "OFF":
					v = "0"
				case v == "ON":
					v = "1"
				}
				fmt.Fprintf(&out, "%s\n", v)
			}
			// Anything else (CREATE USER, GRANT, ...) is accepted: a stand-in keeps no tables.
		}
	}
	return out.String(), nil
}

// -- the clients ---------------------------------------------------------------------------------

// target reads -h/--host, -P/--port and -S/--socket (a socket: the local server, during its init
// phase too); the SQL of -e/--execute when asked for.
func target(args []string) (host, port, execute string, socket bool) {
	host, port = "localhost", env("MYSQL_TCP_PORT", "3306")
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
		case strings.HasPrefix(a, "-P") && len(a) > 2:
			port = a[2:]
		case a == "-e" || a == "--execute":
			execute = next()
		case strings.HasPrefix(a, "--execute="):
			execute = strings.TrimPrefix(a, "--execute=")
		case a == "-S" || a == "--socket":
			next()
			socket = true
		case strings.HasPrefix(a, "--socket="):
			socket = true
		case a == "-u" || a == "--user":
			next()
		}
	}
	return host, port, execute, socket
}

func mysqlClient(args []string) int {
	_, _, sql, socket := target(args)
	if sql == "" {
		body, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ERROR: reading stdin: %v\n", err)
			return 1
		}
		sql = string(body)
	}
	cmd := "SQL"
	if socket {
		cmd = "SOCKET-SQL"
	}
	return client(args, cmd, []byte(sql), os.Stdout)
}

// client sends one command (and a body, for SQL) to the server and copies the answer.
func client(args []string, cmd string, body []byte, out *os.File) int {
	host, port, _, _ := target(args)
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: 'Can't connect to MySQL server on '%s:%s' (%v)'\n", host, port, err)
		return 1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, cmd)
	if body != nil {
		_, _ = conn.Write(body)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite() // the server reads the SQL to EOF
		}
	}
	reply := bufio.NewReader(conn)
	switch cmd {
	case "PING":
		line, _ := reply.ReadString('\n')
		if strings.TrimSpace(line) != "OK" {
			fmt.Fprintf(os.Stderr, "error: unexpected reply %q\n", strings.TrimSpace(line))
			return 1
		}
		fmt.Fprintln(out, "mysqld is alive")
		return 0
	case "SQL", "SOCKET-SQL":
		line, _ := reply.ReadString('\n')
		if status := strings.TrimSpace(line); status != "OK" {
			fmt.Fprintf(os.Stderr, "ERROR: %s\n", strings.TrimPrefix(status, "ERR "))
			return 1
		}
	}
	if _, err := reply.WriteTo(out); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}
