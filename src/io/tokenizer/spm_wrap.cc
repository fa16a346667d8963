// The C wrapper over Debian's libsentencepiece (spm_wrap.h). C++ stays in this file: every
// entry point catches what the library or the standard library may throw (bad_alloc) and
// turns it into a return code, since an exception must not unwind through C frames.
#include "spm_wrap.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct spm_wrap {
    sentencepiece::SentencePieceProcessor sp;
};

static int fail(char *err, size_t errlen, int rc, const std::string &msg) {
    if (errlen) std::snprintf(err, errlen, "%s", msg.c_str());
    return rc;
}

extern "C" int spm_wrap_load(const void *data, size_t size, spm_wrap **out, char *err, size_t errlen) {
    *out = nullptr;
    try {
        spm_wrap *s = new spm_wrap;
        auto st = s->sp.LoadFromSerializedProto(std::string_view(static_cast<const char *>(data), size));
        if (!st.ok()) {
            delete s;
            // the library's message for bytes that are no protobuf names its own source line
            std::string why(st.error_message());
            if (why.find("ParseFromArray") != std::string::npos) why = "not a model protobuf";
            return fail(err, errlen, 2, "not a SentencePiece model (" + why + ")");
        }
        if (s->sp.GetPieceSize() <= 0) {
            delete s;
            return fail(err, errlen, 2, "not a SentencePiece model (no pieces)");
        }
        *out = s;
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, errlen, 1, "out of memory loading a SentencePiece model");
    } catch (const std::exception &e) {
        return fail(err, errlen, 2, std::string("not a SentencePiece model (") + e.what() + ")");
    }
}

extern "C" void spm_wrap_free(spm_wrap *s) { delete s; }

extern "C" int64_t spm_wrap_vocab(const spm_wrap *s) { return s->sp.GetPieceSize(); }
extern "C" int32_t spm_wrap_bos(const spm_wrap *s) { return s->sp.bos_id() >= 0 ? s->sp.bos_id() : -1; }
extern "C" int32_t spm_wrap_eos(const spm_wrap *s) { return s->sp.eos_id() >= 0 ? s->sp.eos_id() : -1; }

extern "C" int spm_wrap_encode(const spm_wrap *s, const char *text, size_t len, int32_t **ids, size_t *n, char *err,
                               size_t errlen) {
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int> v;
        auto st = s->sp.Encode(std::string_view(text, len), &v);
        if (!st.ok()) return fail(err, errlen, 2, "SentencePiece refused the text: " + st.ToString());
        if (v.empty()) return 0;
        int32_t *a = static_cast<int32_t *>(std::malloc(v.size() * sizeof *a));
        if (!a) return fail(err, errlen, 1, "out of memory encoding text");
        for (size_t i = 0; i < v.size(); i++) a[i] = v[i];
        *ids = a;
        *n = v.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, errlen, 1, "out of memory encoding text");
    } catch (const std::exception &e) {
        return fail(err, errlen, 2, std::string("SentencePiece refused the text: ") + e.what());
    }
}

extern "C" int spm_wrap_decode(const spm_wrap *s, const int32_t *ids, size_t n, char **text, char *err, size_t errlen) {
    *text = nullptr;
    try {
        std::vector<int> v(ids, ids + n);
        std::string out;
        auto st = s->sp.Decode(v, &out);
        if (!st.ok()) return fail(err, errlen, 2, "SentencePiece refused the ids: " + st.ToString());
        char *c = static_cast<char *>(std::malloc(out.size() + 1));
        if (!c) return fail(err, errlen, 1, "out of memory decoding ids");
        size_t m = 0;
        for (char ch : out)
            if (ch != '\0') c[m++] = ch; // a byte piece <0x00>: a C string cannot hold it
        c[m] = '\0';
        *text = c;
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, errlen, 1, "out of memory decoding ids");
    } catch (const std::exception &e) {
        return fail(err, errlen, 2, std::string("SentencePiece refused the ids: ") + e.what());
    }
}
