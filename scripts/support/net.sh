# Shell helpers shared by scripts/bench, scripts/bench-http and scripts/profile-http (sourced):
# a free loopback port, and waiting for a server of ours to answer.

# Prints a loopback port nothing listens on now (there is a race until the server binds it).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to 10 s for the python3 snippet CODE to succeed; says FAILURE when it never does.
wait_until() {
    for _ in $(seq 100); do
        python3 -c "$2" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$1" >&2
    return 1
}

# Waits for GET URL/healthz to answer.
wait_http() {
    wait_until "no answer from $1" "import urllib.request; urllib.request.urlopen('$1/healthz', timeout=1)"
}

# Waits for something to listen on 127.0.0.1:PORT.
wait_tcp() {
    wait_until "nothing listens on port $1" "import socket; socket.create_connection(('127.0.0.1', $1), timeout=1)"
}
