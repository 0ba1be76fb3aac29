/*
 * cp_litellm: reads LiteLLM's model_prices_and_context_window.json format
 * (an object whose keys are model ids and whose values describe each
 * model) into rows of model_catalog. Pure: no database, no network; the
 * import (cp_catalog_import.h) writes what it returns.
 *
 * Money never passes through a double: every number of the document is
 * turned into a string of its source text first (gw_json_quote_numbers)
 * and each price is parsed with gw_money_parse. An entry whose price is not
 * an exact number of picodollars (or whose any mapped field is malformed)
 * is rejected whole, with a message naming the model and the field; the
 * other entries are unaffected. docs/pricing.md has the mapping.
 */
#ifndef CP_LITELLM_H
#define CP_LITELLM_H

#include <jansson.h>
#include <stddef.h>

struct cp_litellm {
    /* Rows for model_catalog, one per accepted entry, in document order:
     * {"model","mode","litellm_provider","context_window",
     *  "max_output_tokens","capabilities","input_price","output_price",
     *  "cache_read_price","cache_write_5m_price","cache_write_1h_price",
     *  "reasoning_price","audio_second_price","character_price",
     *  "image_price","media_input_price","media_output_price","currency"},
     * every member present (null: the document does not say). Prices are
     * integer picodollars per token (per second of input audio, per
     * character, per image for those three). */
    json_t *rows;
    /* One {"model","field","message"} per rejected entry, in document
     * order; message reads "<model>: <field>: <text> <reason>". */
    json_t *rejected;
    size_t ignored; /* the "sample_spec" key, and entries that are not objects */
};

/*
 * Parses text[0..n). GW_OK fills out (free it with cp_litellm_free), even
 * when every entry is rejected. GW_EINVAL, with a message in msg, when the
 * text is not a JSON object (malformed, a duplicate key, nested deeper than
 * 64); the message gives a position, never a part of the text. GW_ENOMEM.
 */
int cp_litellm_parse(const char *text, size_t n, struct cp_litellm *out, char *msg, size_t msglen)
    __attribute__((warn_unused_result));
void cp_litellm_free(struct cp_litellm *l);

#endif
