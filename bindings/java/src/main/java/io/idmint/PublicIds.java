package io.idmint;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.Objects;

/**
 * Keyed, reversible obfuscation of IDs for the public, and its text forms
 * ({@code dec}, {@code base32}, {@code sqids}), with the settings of the
 * config's {@code [obfuscation]} section.
 *
 * <p>Public IDs are {@code bits} wide (63 by default, so they fit a signed
 * {@code long}). With {@code bits(64)} they fill the {@code long}: read them as
 * unsigned ({@link Long#toUnsignedString(long)}). Immutable and thread-safe.
 */
public final class PublicIds {
    private final NativeRef ref;

    private PublicIds(long handle) {
        this.ref = NativeRef.own(this, handle, null, Native::publicIdsFree);
    }

    /**
     * A builder for the key ring {@code key}: one key in hex, or
     * {@code "0:<hex> 1:<hex>"} for a ring with key IDs.
     *
     * @param key the ring, as the config's {@code obfuscation.key}: entries of
     *     32 or 64 hex digits, each optionally prefixed by its key ID; checked by
     *     {@link Builder#build()}
     * @return a new builder with the defaults: 63 bits, no key-ID bits, the last
     *     key active, {@code dec}
     */
    public static Builder builder(String key) {
        return new Builder(Objects.requireNonNull(key, "key"));
    }

    /**
     * From the {@code [obfuscation]} section of the config at {@code config} (and
     * {@code IDMINT_OBFUSCATION_KEY}).
     *
     * @param config the path of an {@code idmint serve} config file (TOML); the
     *     whole file is checked as the server checks it
     * @return public IDs that agree with a server on the same config
     * @throws IdmintException {@code invalid_config} naming the setting (never
     *     quoting a key), also when the section has no key
     */
    public static PublicIds fromConfig(Path config) {
        return new PublicIds(Native.publicIdsFromConfig(Objects.requireNonNull(config, "config").toString()));
    }

    /**
     * The public ID of {@code id}.
     *
     * @param id an ID, 0 to 2^63 - 1 and no wider than {@link #bits()}
     * @return its public ID, {@link #bits()} wide (read it as unsigned with 64)
     * @throws IdmintException {@code invalid_id} for a negative ID or one wider
     *     than the public IDs
     */
    public long obfuscate(long id) {
        try {
            return Native.publicIdsObfuscate(ref.handle, id);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The ID behind a public ID.
     *
     * @param publicId a public ID made with these settings (as unsigned with 64 bits)
     * @return the ID {@link #obfuscate(long)} made it from
     * @throws IdmintException {@code invalid_public_id} for a value wider than
     *     {@link #bits()}, {@code unknown_key_id} for a key ID with no key in the ring
     */
    public long reveal(long publicId) {
        try {
            return Native.publicIdsReveal(ref.handle, publicId);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * A public ID in the text form.
     *
     * @param publicId a public ID (as unsigned with 64 bits)
     * @return its text in {@link #format()}: decimal digits, Crockford base32
     *     (upper case) or Sqids
     * @throws IdmintException {@code encode_failed} when Sqids can't write it
     */
    public String encode(long publicId) {
        try {
            return Native.publicIdsEncode(ref.handle, publicId);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The public ID a text reads as.
     *
     * @param text a public ID's text in {@link #format()} (base32 in either case)
     * @return the public ID
     * @throws IdmintException {@code invalid_public_id} naming the text
     */
    public long decode(String text) {
        Objects.requireNonNull(text, "text");
        try {
            return Native.publicIdsDecode(ref.handle, text);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The public ID of {@code id}, as text: {@link #obfuscate(long)} then
     * {@link #encode(long)}.
     *
     * @param id an ID, 0 to 2^63 - 1
     * @return the public ID's text
     * @throws IdmintException as {@link #obfuscate(long)} and {@link #encode(long)}
     */
    public String obfuscateText(long id) {
        try {
            return Native.publicIdsObfuscateText(ref.handle, id);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The ID behind a public ID's text: {@link #decode(String)} then
     * {@link #reveal(long)}.
     *
     * @param text a public ID's text
     * @return the ID
     * @throws IdmintException as {@link #decode(String)} and {@link #reveal(long)}
     */
    public long revealText(String text) {
        Objects.requireNonNull(text, "text");
        try {
            return Native.publicIdsRevealText(ref.handle, text);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The text form.
     *
     * @return {@code dec}, {@code base32} or {@code sqids}
     */
    public String format() {
        try {
            return Native.publicIdsFormat(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The width of public IDs.
     *
     * @return bits, 32 to 64 (63 by default)
     */
    public int bits() {
        try {
            return Native.publicIdsBits(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The settings of {@code [obfuscation]}. What is not set takes idmint's
     * default (63 bits, no key-ID bits, the last key listed, {@code dec}),
     * and every number is checked by idmint, at {@link #build()}.
     */
    public static final class Builder {
        private final String key;
        private Integer bits;
        private Integer keyIdBits;
        private Integer activeKey;
        private String format;

        private Builder(String key) {
            this.key = key;
        }

        /**
         * The width of public IDs (default 63).
         *
         * @param bits 32 to 64; with 64, public IDs fill the {@code long} and read
         *     as unsigned
         * @return this builder
         */
        public Builder bits(int bits) {
            this.bits = bits;
            return this;
        }

        /**
         * Bits of the public ID that name the key (default 0: one key).
         *
         * @param keyIdBits how many of the public ID's bits carry the key ID, so a
         *     ring can rotate keys and still reveal old public IDs
         * @return this builder
         */
        public Builder keyIdBits(int keyIdBits) {
            this.keyIdBits = keyIdBits;
            return this;
        }

        /**
         * The key ID new public IDs are made with (default: the last key listed).
         *
         * @param activeKey a key ID of the ring
         * @return this builder
         */
        public Builder activeKey(int activeKey) {
            this.activeKey = activeKey;
            return this;
        }

        /**
         * The text form (default {@code dec}).
         *
         * @param format {@code dec}, {@code base32} or {@code sqids}; checked by
         *     {@link #build()}
         * @return this builder
         */
        public Builder format(String format) {
            this.format = Objects.requireNonNull(format, "format");
            return this;
        }

        /**
         * The public IDs.
         *
         * @return public IDs that agree with a server whose {@code [obfuscation]}
         *     has the same settings
         * @throws IdmintException {@code invalid_config} for a number outside 0
         *     to 255 (the config's type: {@code obfuscation.bits = 300 is out of
         *     range: 0 to 255}), {@code invalid_key} for a malformed ring (an
         *     entry that is no 32 or 64 hex digits, a key ID that is no number),
         *     {@code invalid_obfuscator} for settings that don't fit together or an
         *     unknown format; never with the key in the message
         */
        public PublicIds build() {
            return new PublicIds(Native.publicIdsNew(
                    key,
                    bits != null,
                    bits == null ? 0 : bits,
                    keyIdBits != null,
                    keyIdBits == null ? 0 : keyIdBits,
                    activeKey != null,
                    activeKey == null ? 0 : activeKey,
                    format));
        }
    }
}
