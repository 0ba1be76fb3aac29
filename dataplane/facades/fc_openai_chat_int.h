/*
 * The OpenAI chat completions facade's own pieces, shared by its files and
 * by nothing else.
 */
#ifndef FC_OPENAI_CHAT_INT_H
#define FC_OPENAI_CHAT_INT_H

#include "canon.h"

/* openai_chat_parse.c: the facade's parse (the accepted fields are listed
 * in openai_chat.c's header). */
int fc_openai_chat_parse(struct canon_req *r, struct canon_err *err);

#endif
