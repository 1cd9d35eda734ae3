// The outside referee of the evidence log (tests/log/test_referee.py): verifies a deployment's
// checkpoint, tiles, consistency and per-element inclusion with nothing but Go's
// golang.org/x/mod/sumdb/note and sumdb/tlog (Debian's golang-golang-x-mod-dev, built in
// GOPATH mode, offline).
//
// Usage: referee MIRROR VERIFIER_KEY OLD_CHECKPOINT ELEMENTS
//
//	MIRROR          a directory holding the log's files at their C2SP tlog-tiles paths
//	                (checkpoint, tile/L/N[.p/W], tile/entries/N[.p/W])
//	VERIFIER_KEY    the log's note verifier key (handoff-trace log key)
//	OLD_CHECKPOINT  a checkpoint saved before more was ingested
//	ELEMENTS        lines "PROOF_FILE LEAF_HEX": a tlog-proof file of an element and the
//	                leaf the auditor computed from the element's octets
//
// Exits 1 with "FAIL: ..." at the first thing that does not verify.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

type checkpoint struct {
	origin string
	tree   tlog.Tree
}

func openCheckpoint(data []byte, verifiers note.Verifiers) checkpoint {
	n, err := note.Open(data, verifiers)
	if err != nil {
		fail("checkpoint signature: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 {
		fail("checkpoint: too few lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		fail("checkpoint root hash")
	}
	var h tlog.Hash
	copy(h[:], root)
	return checkpoint{lines[0], tlog.Tree{N: size, Hash: h}}
}

// c2spPath maps x/mod's tile path (tile/H/L/N, tile/H/data/N) to C2SP's (tile/L/N,
// tile/entries/N): the same tiles, without the height segment.
func c2spPath(t tlog.Tile) string {
	p := t.Path()
	p = strings.Replace(p, fmt.Sprintf("tile/%d/data/", height), "tile/entries/", 1)
	return strings.Replace(p, fmt.Sprintf("tile/%d/", height), "tile/", 1)
}

type mirror struct{ dir string }

func (m mirror) Height() int { return height }

// ReadTiles reads each tile; a partial tile the mirror lacks (one of an older tree size) is
// read as the prefix of a wider one of the same index, as C2SP tlog-tiles lets clients do.
func (m mirror) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		data, err := os.ReadFile(filepath.Join(m.dir, c2spPath(t)))
		for w := t.W + 1; err != nil && w <= 1<<height; w++ {
			wider := t
			wider.W = w
			data, err = os.ReadFile(filepath.Join(m.dir, c2spPath(wider)))
			if err == nil {
				data = data[:t.W*tlog.HashSize]
			}
		}
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (m mirror) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

// entries splits a C2SP entry bundle: big-endian uint16 length, then the entry.
func entries(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 2 {
			fail("entry bundle: truncated")
		}
		n := int(data[0])<<8 | int(data[1])
		if len(data) < 2+n {
			fail("entry bundle: truncated entry")
		}
		out = append(out, data[2:2+n])
		data = data[2+n:]
	}
	return out
}

type proofFile struct {
	index int64
	proof tlog.RecordProof
	note  []byte
}

func readProof(path string) proofFile {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	head, rest, found := bytes.Cut(data, []byte("\n\n"))
	if !found {
		fail("%s: no checkpoint", path)
	}
	lines := strings.Split(string(head), "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" || len(lines) < 2 || !strings.HasPrefix(lines[1], "index ") {
		fail("%s: not a tlog-proof file", path)
	}
	index, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "index "), 10, 64)
	if err != nil {
		fail("%s: index: %v", path, err)
	}
	var proof tlog.RecordProof
	for _, line := range lines[2:] {
		b, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(b) != tlog.HashSize {
			fail("%s: proof hash", path)
		}
		var h tlog.Hash
		copy(h[:], b)
		proof = append(proof, h)
	}
	return proofFile{index, proof, rest}
}

func main() {
	if len(os.Args) != 5 {
		fail("usage: referee MIRROR VERIFIER_KEY OLD_CHECKPOINT ELEMENTS")
	}
	dir, key, oldPath, list := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	verifier, err := note.NewVerifier(key)
	if err != nil {
		fail("verifier key: %v", err)
	}
	verifiers := note.VerifierList(verifier)
	data, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	if err != nil {
		fail("%v", err)
	}
	cur := openCheckpoint(data, verifiers)
	if cur.origin != verifier.Name() {
		fail("checkpoint origin %q is not the key's name %q", cur.origin, verifier.Name())
	}
	fmt.Printf("checkpoint: %s, %d leaves, signature verified\n", cur.origin, cur.tree.N)

	// Every tile of the tree, each read through a hash reader that authenticates what it
	// loads against the signed root, and compared with the file served.
	reader := tlog.TileHashReader(cur.tree, mirror{dir})
	// NewTiles lists every width of the last tile of each level; the tree's own is the widest.
	var tiles []tlog.Tile
	widest := map[[2]int64]int{}
	all := tlog.NewTiles(height, 0, cur.tree.N)
	for _, t := range all {
		if k := [2]int64{int64(t.L), t.N}; t.W > widest[k] {
			widest[k] = t.W
		}
	}
	for _, t := range all {
		if t.W == widest[[2]int64{int64(t.L), t.N}] {
			tiles = append(tiles, t)
		}
	}
	for _, t := range tiles {
		served, err := os.ReadFile(filepath.Join(dir, c2spPath(t)))
		if err != nil {
			fail("%v", err)
		}
		want, err := tlog.ReadTileData(t, reader)
		if err != nil {
			fail("tile %s: %v", c2spPath(t), err)
		}
		if !bytes.Equal(served, want) {
			fail("tile %s does not match the signed tree", c2spPath(t))
		}
	}
	fmt.Printf("tiles: %d verified against the root\n", len(tiles))

	data, err = os.ReadFile(oldPath)
	if err != nil {
		fail("%v", err)
	}
	old := openCheckpoint(data, verifiers)
	treeProof, err := tlog.ProveTree(cur.tree.N, old.tree.N, reader)
	if err != nil {
		fail("consistency proof: %v", err)
	}
	if err := tlog.CheckTree(treeProof, cur.tree.N, cur.tree.Hash, old.tree.N, old.tree.Hash); err != nil {
		fail("consistency %d -> %d: %v", old.tree.N, cur.tree.N, err)
	}
	fmt.Printf("consistency: %d -> %d verified\n", old.tree.N, cur.tree.N)

	file, err := os.Open(list)
	if err != nil {
		fail("%v", err)
	}
	defer file.Close()
	bundles := map[int64][][]byte{}
	count := 0
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) != 2 {
			fail("elements: malformed line")
		}
		leaf, err := hex.DecodeString(fields[1])
		if err != nil {
			fail("elements: leaf hex")
		}
		record := tlog.RecordHash(leaf)
		p := readProof(fields[0])
		at := openCheckpoint(p.note, verifiers)
		if err := tlog.CheckRecord(p.proof, at.tree.N, at.tree.Hash, p.index, record); err != nil {
			fail("%s: inclusion: %v", fields[0], err)
		}
		viaTiles, err := tlog.ProveRecord(cur.tree.N, p.index, reader)
		if err != nil {
			fail("%s: proof from tiles: %v", fields[0], err)
		}
		if err := tlog.CheckRecord(viaTiles, cur.tree.N, cur.tree.Hash, p.index, record); err != nil {
			fail("%s: inclusion via tiles: %v", fields[0], err)
		}
		n := p.index / (1 << height)
		if _, ok := bundles[n]; !ok {
			w := cur.tree.N - n*(1<<height)
			if w > 1<<height {
				w = 1 << height
			}
			t := tlog.Tile{H: height, L: -1, N: n, W: int(w)}
			raw, err := os.ReadFile(filepath.Join(dir, c2spPath(t)))
			if err != nil {
				fail("%v", err)
			}
			bundles[n] = entries(raw)
		}
		entry := bundles[n][p.index%(1<<height)]
		if !bytes.Equal(entry, leaf) || tlog.RecordHash(entry) != record {
			fail("%s: the entry bundle does not hold this leaf", fields[0])
		}
		count++
	}
	if err := scanner.Err(); err != nil {
		fail("%v", err)
	}
	fmt.Printf("inclusion: %d elements verified (proof files, tiles and entry bundles)\n", count)
}
