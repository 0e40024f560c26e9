package idemhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// ErrUnsupportedMediaType is what a Decoder returns, wrapped or not, for a
// request whose content type it does not take, so that the next decoder is
// tried. When no decoder takes it, Handler answers 415.
var ErrUnsupportedMediaType = errors.New("idemhttp: unsupported media type")

// DecodeJSON is the decoder Handler always has, tried after those of
// WithDecoder: it takes application/json and every application/*+json
// type, and decodes leniently, as encoding/json does: unknown fields are
// ignored, so that a sender may add fields before the handler knows them.
// One JSON value fills the body; anything after it is a malformed body.
func DecodeJSON(r *http.Request, v any) error {
	if !isJSON(r.Header.Get("Content-Type")) {
		return ErrUnsupportedMediaType
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// isJSON reports whether the media type of a Content-Type header is JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// decode runs the decoders on r in order until one takes its content type.
// It returns the problem to answer with, or ok.
func decode(r *http.Request, decoders []Decoder, v any, maxBody int64) (Problem, bool) {
	for _, d := range decoders {
		err := d(r, v)
		var tooLarge *http.MaxBytesError
		switch {
		case err == nil:
			return Problem{}, true
		case errors.As(err, &tooLarge):
			return newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("The body is longer than the %d bytes this endpoint reads.", maxBody), err), false
		case errors.Is(err, ErrUnsupportedMediaType):
			continue
		default:
			return newProblem(ProblemMalformedBody, http.StatusBadRequest, "The body could not be decoded.", err), false
		}
	}
	return newProblem(ProblemUnsupportedMediaType, http.StatusUnsupportedMediaType,
		"No decoder of this endpoint takes the request's Content-Type (JSON is application/json).", nil), false
}
