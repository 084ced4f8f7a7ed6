"""The Gemini API dialect (``generateContent``, ``streamGenerateContent``,
``countTokens``, ``embedContent``, models), both directions.

Server side (Gemini CLI and the google-genai SDKs talking to the gateway) and client side
(the ``gemini`` backend talking to Google AI Studio). See docs/GEMINI.md.
"""
