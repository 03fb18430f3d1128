package pacer_test

import (
	"fmt"
	"net/http"

	"github.com/tollgate-go/tollgate/examples/client/pacer"
)

// A client of a tollgate API, paced per tenant: each tenant has a budget
// of its own on the server.
func ExampleTransport() {
	client := &http.Client{Transport: &pacer.Transport{
		Key: func(r *http.Request) string { return r.URL.Host + "|" + r.Header.Get("X-Tenant-ID") },
	}}
	req, err := http.NewRequest(http.MethodGet, "http://localhost:8080/api/hello", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-Tenant-ID", "initech")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
