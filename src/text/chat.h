/* Chat templates: render a conversation into the prompt text a model expects.
 * The template family is detected from the model's tokenizer.chat_template
 * text (or named explicitly); each family is rendered by C code that produces
 * exactly what the Jinja template produces for the same messages.
 *
 * The interface is public (include/reprise_tools.h, "chat templates"). */
#ifndef RP_CHAT_H
#define RP_CHAT_H

#include "reprise.h"
#include "reprise_tools.h"

#endif
