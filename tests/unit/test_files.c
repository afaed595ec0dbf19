/* Files (issue 22): what atomic output may replace (links, modes, devices,
 * FIFOs, the process's own inputs), the table of live temporary files, and
 * inputs that are not regular files or are too large. */
#include "base/util.h"
#include "format/gguf.h"
#include "reprise_tools.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool file_is(const char *path, const char *want) {
    size_t n;
    char *d = test_read(path, &n);
    bool ok = d && n == strlen(want) && memcmp(d, want, n) == 0;
    free(d);
    return ok;
}

void test_files_atomic_symlink_target(void) {
    char target[512], link[512];
    snprintf(target, sizeof target, "%s", test_tmp("files-target.txt"));
    snprintf(link, sizeof link, "%s", test_tmp("files-link.txt"));
    unlink(target);
    unlink(link);
    REQUIRE(rp_atomic_write_file(target, "old", 3) == RP_OK, "%s", rp_last_error());
    REQUIRE(chmod(target, 0640) == 0, "chmod");
    REQUIRE(symlink(target, link) == 0, "symlink: %s", strerror(errno));
    CHECK(rp_atomic_write_file(link, "new", 3) == RP_OK, "%s", rp_last_error());
    struct stat ls, ts;
    CHECK(lstat(link, &ls) == 0 && S_ISLNK(ls.st_mode), "the link was replaced by a file");
    CHECK(file_is(target, "new"), "the target was not written");
    CHECK(stat(target, &ts) == 0 && (ts.st_mode & 07777) == 0640, "mode %o, want 0640",
          (unsigned)(ts.st_mode & 07777));
    /* a link to nothing is refused, as cp refuses it */
    unlink(target);
    CHECK(rp_atomic_write_file(link, "x", 1) == RP_ERR_IO, "dangling link accepted");
    CHECK(strstr(rp_last_error(), "symbolic link"), "message: %s", rp_last_error());
    CHECK(access(target, F_OK) != 0, "wrote through a dangling link");
    unlink(link);
}

void test_files_atomic_refusals(void) {
    char ro[512], fifo[512], dir[512];
    snprintf(ro, sizeof ro, "%s", test_tmp("files-ro.txt"));
    snprintf(fifo, sizeof fifo, "%s", test_tmp("files-fifo"));
    snprintf(dir, sizeof dir, "%s", test_tmp("files-dir"));
    unlink(ro);
    unlink(fifo);
    rmdir(dir);
    REQUIRE(rp_atomic_write_file(ro, "keep", 4) == RP_OK, "%s", rp_last_error());
    REQUIRE(chmod(ro, 0444) == 0, "chmod");
    CHECK(rp_atomic_write_file(ro, "lost", 4) == RP_ERR_IO, "a 0444 file was replaced");
    CHECK(strstr(rp_last_error(), "read-only"), "message: %s", rp_last_error());
    CHECK(file_is(ro, "keep"), "the read-only file changed");
    REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    CHECK(rp_atomic_write_file(fifo, "x", 1) == RP_ERR_IO, "a FIFO was replaced");
    CHECK(strstr(rp_last_error(), "FIFO"), "message: %s", rp_last_error());
    struct stat st;
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is gone");
    REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
    CHECK(rp_atomic_write_file(dir, "x", 1) == RP_ERR_IO, "a directory accepted");
    CHECK(strstr(rp_last_error(), "directory"), "message: %s", rp_last_error());
    /* a character device is written through, not replaced */
    CHECK(rp_atomic_write_file("/dev/null", "x", 1) == RP_OK, "%s", rp_last_error());
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null was replaced");
    chmod(ro, 0644);
    unlink(ro);
    unlink(fifo);
    rmdir(dir);
}

void test_files_atomic_refuses_open_input(void) {
    char path[512];
    snprintf(path, sizeof path, "%s", test_tmp("files-input.gguf"));
    size_t n;
    char *d = test_read(test_shared("models/stories260K.gguf"), &n);
    REQUIRE(d, "stories260K missing");
    REQUIRE(rp_atomic_write_file(path, d, n) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(path, &g) == RP_OK, "%s", rp_last_error());
    CHECK(rp_atomic_write_file(path, "x", 1) == RP_ERR_IO, "the open input was replaced");
    CHECK(strstr(rp_last_error(), "input"), "message: %s", rp_last_error());
    rp_output_allow_inputs(true);
    CHECK(rp_gguf_copy(path, path) == RP_OK, "forced: %s", rp_last_error());
    rp_output_allow_inputs(false);
    rp_gguf_close(g);
    /* closed: no longer an input */
    CHECK(rp_atomic_write_file(path, d, n) == RP_OK, "%s", rp_last_error());
    free(d);
    unlink(path);
}

void test_files_temps_removed(void) {
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s", test_tmp("files-temp.bin"));
    rp_atomic_file af;
    REQUIRE(rp_atomic_open(&af, path) == RP_OK, "%s", rp_last_error());
    snprintf(tmp, sizeof tmp, "%s", af.tmp_path);
    CHECK(access(tmp, F_OK) == 0, "no temporary file");
    rp_atomic_remove_temps(); /* what a signal handler does */
    CHECK(access(tmp, F_OK) != 0, "the temporary file survived");
    rp_atomic_abort(&af);
    /* committed and aborted writers leave the table */
    REQUIRE(rp_atomic_open(&af, path) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_atomic_commit(&af) == RP_OK, "%s", rp_last_error());
    rp_atomic_remove_temps();
    CHECK(access(path, F_OK) == 0, "a committed file was removed");
    unlink(path);
}

void test_files_inputs_regular_and_bounded(void) {
    char fifo[512], big[512];
    snprintf(fifo, sizeof fifo, "%s", test_tmp("files-in-fifo"));
    snprintf(big, sizeof big, "%s", test_tmp("files-big.txt"));
    unlink(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo");
    rp_gguf *g;
    /* a FIFO with no writer would block open() forever */
    CHECK(rp_gguf_open(fifo, &g) == RP_ERR_IO, "FIFO opened");
    CHECK(strstr(rp_last_error(), "FIFO"), "message: %s", rp_last_error());
    char *t;
    size_t n;
    CHECK(rp_read_file(fifo, &t, &n) == RP_ERR_IO, "FIFO read");
    CHECK(rp_read_file("/dev/zero", &t, &n) == RP_ERR_IO, "/dev/zero read");
    CHECK(strstr(rp_last_error(), "character device"), "message: %s", rp_last_error());
    REQUIRE(rp_atomic_write_file(big, "0123456789", 10) == RP_OK, "%s", rp_last_error());
    CHECK(rp_read_file_max(big, 9, &t, &n) == RP_ERR_IO, "over the limit accepted");
    CHECK(strstr(rp_last_error(), "limit of 9 bytes"), "message: %s", rp_last_error());
    CHECK(rp_read_file_max(big, 10, &t, &n) == RP_OK && n == 10, "%s", rp_last_error());
    free(t);
    rp_planfile *pf;
    CHECK(rp_planfile_read(fifo, &pf) != RP_OK, "plan file from a FIFO");
    unlink(fifo);
    unlink(big);
}

/* general.alignment 1, 2 or 4 would put f32 tensor data at misaligned
 * addresses (UBSan: misaligned loads): refused, naming the value. */
void test_files_gguf_alignment_multiple_of_8(void) {
    static const uint32_t bad[] = {1, 2, 4}, good[] = {8, 32};
    float data[4] = {1, 2, 3, 4};
    int64_t ne[1] = {4};
    for (int k = 0; k < 5; k++) {
        const uint32_t al = k < 3 ? bad[k] : good[k - 3];
        rp_gguf_writer *w = rp_gguf_writer_new();
        REQUIRE(w, "writer");
        rp_gguf_w_set_u32(w, "general.alignment", al);
        rp_gguf_w_set_str(w, "general.name", "x");
        rp_gguf_w_add_tensor(w, "t", RP_TYPE_F32, 1, ne, data);
        const char *path = test_tmp("files-align.gguf");
        REQUIRE(rp_gguf_w_write(w, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
        rp_gguf_writer_free(w);
        rp_gguf *g = NULL;
        rp_status s = rp_gguf_open(path, &g);
        if (k < 3) {
            CHECK(s == RP_ERR_FORMAT, "alignment %u accepted", al);
            CHECK(strstr(rp_last_error(), "multiple of 8"), "message: %s", rp_last_error());
        } else {
            CHECK(s == RP_OK, "alignment %u: %s", al, rp_last_error());
        }
        rp_gguf_close(g);
        unlink(path);
    }
}
