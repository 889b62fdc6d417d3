"""The page's scripts, compressed: bokeh's JavaScript and the plots' data as gzip in base64.

bokeh's inline JavaScript alone is 1.27 MB (``bokeh.min.js``), which made a report of three
tasks 1.3 MB; gzip takes it to about a third. `packed` turns the ``<script>`` elements bokeh
writes (its library, then the document's JSON and the script that embeds it) into inert
``<script type="application/gzip;base64">`` elements and one small loader. The loader
decompresses them in order with the browser's ``DecompressionStream`` (Chromium 80, Firefox 113,
Safari 16.4) and inserts each as a fragment, so its scripts run in the order bokeh wrote them,
the library before the plots that need it. Where the browser lacks it, or a step fails, the page
says so above the sections; the tables, which are plain HTML, read without it.
"""

from __future__ import annotations

import base64
import gzip

#: The id of the note the loader fills where the plots cannot be drawn.
NOTE_ID = "plots-note"

#: The script that unpacks and runs the `pack`-ed elements, in the page's order.
LOADER = """<script>
(async () => {
  const note = (text) => {
    const el = document.getElementById("{NOTE_ID}");
    if (el) { el.textContent = text; el.hidden = false; }
  };
  if (typeof DecompressionStream === "undefined") {
    note("The plots need a browser with DecompressionStream (Chromium 80, Firefox 113, " +
         "Safari 16.4 or newer); the tables read without it.");
    return;
  }
  try {
    for (const el of document.querySelectorAll('script[type="application/gzip;base64"]')) {
      const bytes = Uint8Array.from(atob(el.textContent.trim()), (c) => c.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      const html = await new Response(stream).text();
      el.replaceWith(document.createRange().createContextualFragment(html));
    }
  } catch (error) {
    note(`The plots could not be drawn: ${error}`);
    console.error(error);
  }
})();
</script>""".replace("{NOTE_ID}", NOTE_ID)
#: The hidden note the loader fills when the plots cannot be drawn.
NOTE = f'<div class="note" id="{NOTE_ID}" hidden></div>'


def pack(html: str) -> str:
    """``html`` (script elements) as one inert script element of gzip in base64."""
    data = base64.b64encode(gzip.compress(html.encode(), compresslevel=9, mtime=0)).decode()
    return f'<script type="application/gzip;base64">{data}</script>'
