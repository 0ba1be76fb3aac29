# Writes the file IN as a C byte array named NAME (NUL-terminated, with
# NAME_len) into OUT: run at build time by controlplane/CMakeLists.txt
# (docs/openapi.yaml) and dataplane/CMakeLists.txt (common/guard_rules.json).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* Generated from ${IN} by controlplane/embed.cmake. */\n#include <stddef.h>\n"
     "extern const char ${NAME}[];\nextern const size_t ${NAME}_len;\n"
     "const char ${NAME}[] = {${bytes} 0};\n"
     "const size_t ${NAME}_len = sizeof(${NAME}) - 1;\n")
