// Command storeforward answers GET /proxy?module=NAME with the page at UPSTREAM/NAME, read whole
// before the first byte of the answer is written: the least any /metrics proxy does that must
// see an upstream's whole page before it answers (a page over a limit, or a family split in two,
// is known only at its end). With -stream it copies the page as it arrives instead, the way a
// raw passthrough does, so that the two modes differ in that alone: same language, same HTTP
// stack, same connection reuse. Standard library only. See bench/RESULTS.md section 33.
//
//	storeforward -listen 127.0.0.1:PORT -upstream http://127.0.0.1:NGINX_PORT [-stream]
package main

import (
	"bytes"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to answer on")
	upstream := flag.String("upstream", "", "the pages' base URL, e.g. http://127.0.0.1:8080")
	stream := flag.Bool("stream", false, "copy each page as it arrives instead of reading it whole first")
	flag.Parse()
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}}
	buffers := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	http.HandleFunc("/proxy", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Get(*upstream + "/" + r.URL.Query().Get("module"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		if resp.StatusCode != http.StatusOK {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if *stream {
			if resp.ContentLength >= 0 {
				w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
			}
			_, _ = io.Copy(w, resp.Body)
			return
		}
		buf := buffers.Get().(*bytes.Buffer)
		defer buffers.Put(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		_, _ = w.Write(buf.Bytes())
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
