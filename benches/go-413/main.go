// Go's net/http client, the API server's, sends oversized AdmissionReviews to the guard over
// HTTP/1.1 and HTTP/2 and counts how often it reads the guard's 413 instead of a write error
// (a server that closes while the client still sends). Standard library only.
//
//	go run . ADDR CA_FILE [RUNS] [BODY_BYTES]
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func client(ca *x509.CertPool, http2 bool, keepAlive bool) *http.Client {
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca},
		DisableKeepAlives: !keepAlive,
		ForceAttemptHTTP2: http2,
	}
	if !http2 {
		// An empty map turns HTTP/2 off, as a client without h2 in ALPN.
		transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: go run . ADDR CA_FILE [RUNS] [BODY_BYTES]")
		os.Exit(2)
	}
	addr, caFile := os.Args[1], os.Args[2]
	runs, size := 100, 6<<20
	if len(os.Args) > 3 {
		runs, _ = strconv.Atoi(os.Args[3])
	}
	if len(os.Args) > 4 {
		size, _ = strconv.Atoi(os.Args[4])
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ca := x509.NewCertPool()
	ca.AppendCertsFromPEM(pem)
	body := bytes.Repeat([]byte("a"), size)
	failed := 0
	for _, mode := range []struct {
		name             string
		http2, keepAlive bool
	}{{"HTTP/1.1, a connection each", false, false}, {"HTTP/1.1, keep-alive", false, true}, {"HTTP/2", true, true}} {
		c := client(ca, mode.http2, mode.keepAlive)
		read, other := 0, map[string]int{}
		for i := 0; i < runs; i++ {
			response, err := c.Post("https://"+addr+"/validate?timeout=10s", "application/json", bytes.NewReader(body))
			if err != nil {
				// The cause without the addresses (each connection has its own port).
				cause := err.Error()
				if i := strings.LastIndex(cause, ": "); i >= 0 {
					cause = cause[i+2:]
				}
				other[cause]++
				continue
			}
			io.Copy(io.Discard, response.Body)
			response.Body.Close()
			if response.StatusCode == http.StatusRequestEntityTooLarge {
				read++
			} else {
				other[response.Status]++
			}
		}
		fmt.Printf("%s: %d of %d read the 413 (%d-byte body)", mode.name, read, runs, size)
		for what, n := range other {
			fmt.Printf("; %d: %s", n, what)
		}
		fmt.Println()
		failed += runs - read
	}
	if failed > 0 {
		os.Exit(1)
	}
}
