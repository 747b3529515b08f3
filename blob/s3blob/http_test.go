package s3blob

import (
	"io"
	"net/http"
)

type getResult struct {
	status      int
	body        string
	contentType string
}

func httpGet(u string) (getResult, error) {
	res, err := http.Get(u)
	if err != nil {
		return getResult{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return getResult{res.StatusCode, string(b), res.Header.Get("Content-Type")}, err
}
