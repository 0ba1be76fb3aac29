/*
 * POST /v1/admin/catalog/import: a LiteLLM catalog into model_catalog
 * (cp_catalog_import.h). The body is the LiteLLM document itself, or
 * {"url": "https://..."}: then the control plane fetches it (cp_fetch.h)
 * on the loop's curl multi, without blocking the loop, and answers when the
 * transfer ends. A client that goes away cancels the transfer.
 */
#ifndef CP_CATALOG_API_H
#define CP_CATALOG_API_H

struct cp_call;
struct gw_curlev;

/* Serves the request (any method; only POST is allowed). Ends it, now or
 * (a URL, fetched on curl under the policy fetch_allow: CP_FETCH_ALLOW_*
 * bits) once the fetch and the import are done. */
void cp_catalog_api_import(struct cp_call *c, struct gw_curlev *curl, unsigned fetch_allow);

#endif
