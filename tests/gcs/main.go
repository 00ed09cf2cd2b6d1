// Command gcs-server is the suite's Google Cloud Storage server: fake-gcs-server's emulator (its
// fakestorage package, in memory, over http on a loopback port) plus the one request of GCS's XML
// API that deltalake (object_store) sends and it does not serve as GCS does
// (fsouza/fake-gcs-server#331): an object upload (PUT /<bucket>/<object>), which object_store
// sends for every object, a commit with the header x-goog-if-generation-match: 0, and a listing
// from a key on (start-after), which delta-rs sends to find a table's newer commits. The upload is
// handed to the emulator's own JSON API upload with the same precondition (ifGenerationMatch), so
// a commit that finds its file written gets 412, as from GCS; the listing is the emulator's own,
// from the key on. Everything else, including all that Spark's GCS connector sends (the JSON API),
// is the emulator's own.
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func main() {
	host := flag.String("host", "127.0.0.1", "the address to listen on")
	port := flag.Uint("port", 4443, "the port to listen on")
	bucket := flag.String("bucket", "", "a bucket to create at start")
	asIs := flag.Bool("as-is", false, "serve fake-gcs-server as it is, without the two XML API requests")
	flag.Parse()
	address := fmt.Sprintf("%s:%d", *host, *port)
	server, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true, Scheme: "http", Host: *host, Port: uint16(*port),
		PublicHost: address, ExternalURL: "http://" + address, Writer: os.Stdout,
	})
	if err != nil {
		log.Fatal(err)
	}
	if *bucket != "" {
		server.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: *bucket})
	}
	handler := server.HTTPHandler()
	if !*asIs {
		handler = xmlListings(server, xmlUploads(handler))
	}
	log.Fatal(http.ListenAndServe(address, handler))
}

// xmlListings serves an XML API listing that starts after a key (the emulator would list from
// the first key); any other request goes to next.
func xmlListings(server *fakestorage.Server, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucket := strings.Trim(r.URL.Path, "/")
		query := r.URL.Query()
		after := query.Get("start-after")
		if r.Method != http.MethodGet || bucket == "" || strings.Contains(bucket, "/") || after == "" {
			next.ServeHTTP(w, r)
			return
		}
		options := fakestorage.ListOptions{Prefix: query.Get("prefix"), Delimiter: query.Get("delimiter"), StartOffset: after}
		objects, prefixes, err := server.ListObjectsWithOptions(bucket, options)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		result := fakestorage.ListBucketResult{Name: bucket, Delimiter: options.Delimiter, Prefix: options.Prefix}
		for _, prefix := range prefixes {
			result.CommonPrefixes = append(result.CommonPrefixes, fakestorage.CommonPrefix{Prefix: prefix})
		}
		for _, object := range objects {
			if object.Name > after { // StartOffset includes the key itself
				result.Contents = append(result.Contents, fakestorage.Contents{
					Key: object.Name, Generation: object.Generation, Size: object.Size,
					LastModified: object.Updated.Format(time.RFC3339), ETag: fakestorage.ETag{Value: object.Etag}})
			}
		}
		result.KeyCount = len(result.Contents)
		body, err := xml.Marshal(result)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(xml.Header + string(body)))
	})
}

// xmlUploads serves an XML API object upload through the emulator's JSON API media upload.
func xmlUploads(emulator http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucket, object, found := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		query := r.URL.Query()
		if r.Method != http.MethodPut || !found || object == "" || bucket == "upload" || bucket == "storage" ||
			query.Has("uploadType") || query.Has("X-Goog-Algorithm") || query.Has("uploadId") ||
			r.Header.Get("X-Goog-Copy-Source") != "" {
			emulator.ServeHTTP(w, r)
			return
		}
		upload := url.Values{"uploadType": {"media"}, "name": {object}}
		if generation := r.Header.Get("X-Goog-If-Generation-Match"); generation != "" {
			upload.Set("ifGenerationMatch", generation)
		}
		inner := r.Clone(r.Context())
		inner.Method = http.MethodPost
		inner.URL = &url.URL{Path: "/upload/storage/v1/b/" + bucket + "/o", RawQuery: upload.Encode()}
		inner.RequestURI = ""
		recorded := httptest.NewRecorder()
		emulator.ServeHTTP(recorded, inner)
		if recorded.Code != http.StatusOK {
			w.WriteHeader(recorded.Code)
			_, _ = w.Write(recorded.Body.Bytes())
			return
		}
		var written struct {
			Etag       string `json:"etag"`
			Generation string `json:"generation"`
		}
		if err := json.Unmarshal(recorded.Body.Bytes(), &written); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("ETag", written.Etag)
		w.Header().Set("X-Goog-Generation", written.Generation)
		w.WriteHeader(http.StatusOK)
	})
}
